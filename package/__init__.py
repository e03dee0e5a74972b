"""longhaul: benchmarking of long-haul, high-bandwidth-delay-product data transfer."""

__version__ = "0.1.0"
