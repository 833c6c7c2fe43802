"""Configuration: the YAML contract, validated into typed objects at start-up."""

from gateway.config.loader import DEFAULT_PATH, INIT_NAME, PACKAGED_PATH, find_config, load_config, parse_config
from gateway.config.model import (
    Config,
    ProviderConfig,
    RouteConfig,
    RoutingConfig,
    TargetConfig,
    ToolConfig,
)
from gateway.config.validate import ConfigError

__all__ = [
    "DEFAULT_PATH",
    "INIT_NAME",
    "PACKAGED_PATH",
    "Config",
    "ConfigError",
    "ProviderConfig",
    "RouteConfig",
    "RoutingConfig",
    "TargetConfig",
    "ToolConfig",
    "find_config",
    "load_config",
    "parse_config",
]
