"""What can be tuned: parameters, their domains and validity rules, and the space definitions.

The bottom layer of StoreTune: it imports nothing from tuner/, runners/ or api/.
"""

from storetune.search_spaces.catalog import list_spaces, load_space, space_from_dict
from storetune.search_spaces.conditions import Condition
from storetune.search_spaces.config import Config, Value, config_hash, format_config, format_value
from storetune.search_spaces.parameter import InvalidConfig, Kind, Parameter
from storetune.search_spaces.space import Forbidden, SearchSpace
from storetune.search_spaces.status import Direction, Status, better
from storetune.search_spaces.table import TableSpace, infer_table_space

__all__ = [
    "Condition",
    "Config",
    "Direction",
    "Forbidden",
    "InvalidConfig",
    "Kind",
    "Parameter",
    "SearchSpace",
    "Status",
    "TableSpace",
    "Value",
    "better",
    "config_hash",
    "format_config",
    "format_value",
    "infer_table_space",
    "list_spaces",
    "load_space",
    "space_from_dict",
]
