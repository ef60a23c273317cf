"""A docker-free local Kubernetes control plane (etcd, kube-apiserver, controller-manager,
scheduler, KWOK) with fake GPU nodes, for demos and tests."""
