"""tfcluster: launch, supervise and tear down multi-worker TensorFlow clusters.

This package must import and run without TensorFlow: the launcher runs on ops laptops.
"""

__version__ = "0.1.0"
