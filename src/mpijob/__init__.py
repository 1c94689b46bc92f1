"""mpijob: an MPIJob (kubeflow.org/v2beta1) operator with targeted elastic scale-in."""

from mpijob import lazyk8s as _lazyk8s

# Before our client imports kubernetes_asyncio: its generated models load on first use only
# (~34 MiB less RSS; mpijob/lazyk8s.py).
_lazyk8s.install()
