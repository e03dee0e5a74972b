"""Lab backends: the contract (base.py), the registry (registry.py) and one folder a backend."""
