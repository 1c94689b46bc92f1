"""Access to the Kubernetes API: the client (its transport, token buckets and write classes), the kubeconfig and
the REST paths of the kinds we use. Shared by the executor, which writes, and the runtime's informers and
start-up, which read; it knows nothing of what is written or why."""
