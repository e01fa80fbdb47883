"""What the node's Kubernetes says about a program: the units its container was allocated."""
