"""The node agent: what `atoll topology discover` reads about the GPUs of the node it runs on
(NVLink islands from NVML or `nvidia-smi topo -m`). Pure reading and parsing; publishing to
the Node goes through atoll.kube."""
