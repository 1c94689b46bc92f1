"""mpijob: an MPIJob (kubeflow.org/v2beta1) operator with targeted elastic scale-in."""
