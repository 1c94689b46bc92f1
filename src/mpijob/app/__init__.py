"""The application: the operator's start-up (`operator.py`: the API client, the informers, the controller, leader
election, the health and metrics endpoints) and its metrics (`metrics.py`: attached to the runtime by
composition). The runtime it wires knows nothing of it."""
