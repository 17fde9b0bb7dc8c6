"""Observability: one Prometheus registry and structured JSON logs."""

from switchboard.obs.logs import configure_logging, get_logger
from switchboard.obs.metrics import Metrics

__all__ = ["Metrics", "configure_logging", "get_logger"]
