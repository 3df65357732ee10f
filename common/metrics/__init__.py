"""Metrics: COCO caption metrics, sacreBLEU, attention correctness, the CIDEr-D reward.

`CiderD` (`common.metrics.cider_d`, NumPy only) is imported on first use (PEP 562).
"""

from common.lazy import lazy_getattr

__getattr__ = lazy_getattr(__name__, {"CiderD": "common.metrics.cider_d"})

__all__ = ["CiderD"]
