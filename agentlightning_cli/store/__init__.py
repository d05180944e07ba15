"""The episode store: the only place with SQL. See store.py for the API and migrations.py for the schema.

Bottom layer: may import only errors (and the standard library, orjson, zstandard); it knows nothing of HTTP,
harnesses or training.
"""

from agentlightning_cli.store.calls import KeyframePolicy
from agentlightning_cli.store.models import Call, CallRecord, Episode, Round, Run, StoredCall
from agentlightning_cli.store.store import DB_NAME, EpisodeExistsError, Store
from agentlightning_cli.store.summaries import CallSummary, EpisodeSummary
from agentlightning_cli.store.patches import StoredPatch
from agentlightning_cli.store.training import TrainRound, TrainStep

__all__ = ["Call", "CallRecord", "CallSummary", "EpisodeSummary", "DB_NAME", "Episode", "EpisodeExistsError", "KeyframePolicy", "Round", "Run", "Store", "StoredCall", "StoredPatch", "TrainRound", "TrainStep"]
