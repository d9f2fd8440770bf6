"""polykv-langgraph: LangChain / LangGraph integration for polykv.

See clients/python/README.md.
"""

from .chat import ChatPolyKV, message_to_dict
from .client import AsyncPolyKVClient, PolyKVClient
from .compaction import CompactionNode, CompactionResult, compact_by_refork
from .errors import PolyKVError, PoolConflictError, PoolNotFoundError, PoolSaturatedError
from .gate import CapacityGate
from .state import PolyKVState, latest
from .tools import pool_tools

__all__ = ["AsyncPolyKVClient", "CapacityGate", "ChatPolyKV", "CompactionNode", "CompactionResult",
           "PolyKVClient", "PolyKVError", "PolyKVState", "PoolConflictError", "PoolNotFoundError",
           "PoolSaturatedError", "compact_by_refork", "latest", "message_to_dict", "pool_tools"]
__version__ = "0.1.0"
