"""The schema, as append-only named migrations. Never edit a released migration: add a new one.

Comments inside each CREATE statement say why a table or column exists; SQLite keeps them in
`sqlite_master`, so the generated schema documentation (schema_doc.py) shows them too.
"""

from __future__ import annotations

import sqlite3
import time

from agentlightning_cli.errors import AlightError

M001_INITIAL = """
CREATE TABLE runs (
  -- Why: one row per `alight run`, so episodes of a run (and its rounds) can be found and resumed.
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE,   -- what the user types: `alight inspect NAME`
  config      TEXT NOT NULL,          -- JSON snapshot of the resolved settings, to reproduce the run
  created_at  REAL NOT NULL,          -- time.time() seconds, like every timestamp here
  status      TEXT NOT NULL           -- running | done | failed | interrupted
);

CREATE TABLE rounds (
  -- Why: training happens between rounds; every episode of a round is sampled from one policy, and
  -- the trainer must know which adapter produced the logprobs it uses for importance weights.
  id            TEXT PRIMARY KEY,
  run_id        TEXT NOT NULL REFERENCES runs(id),
  idx           INTEGER NOT NULL,     -- 0, 1, 2, ... within the run
  policy        TEXT NOT NULL,        -- adapter name served by vLLM, e.g. policy-r0
  adapter_path  TEXT,                 -- where that adapter lives on disk (NULL: the zero-initialised one)
  status        TEXT NOT NULL,        -- running | done | failed
  started_at    REAL NOT NULL,
  ended_at      REAL,
  UNIQUE (run_id, idx)
);

CREATE TABLE episodes (
  -- Why: one harness process on one task attempt; the unit that gets a reward and a group advantage.
  id             TEXT PRIMARY KEY,    -- sortable: ep-<time><random>
  run_id         TEXT REFERENCES runs(id),     -- NULL for ad-hoc proxy traffic (`alight proxy`)
  round_id       TEXT REFERENCES rounds(id),
  task_id        TEXT,                -- id from the task set; GRPO groups attempts by it
  attempt        INTEGER NOT NULL,
  harness        TEXT,                -- recipe name, e.g. mini-swe-agent
  key_sha256     BLOB NOT NULL,       -- sha256 of the per-episode API key: the proxy checks it, a leaked
                                      -- database does not hand out working keys
  status         TEXT NOT NULL,       -- pending | running | done | failed
  reward         REAL,
  reward_detail  TEXT,                -- JSON from the reward command's final line (tests passed, ...)
  created_at     REAL NOT NULL,
  started_at     REAL,
  ended_at       REAL,
  exit_code      INTEGER,             -- the harness process's exit code
  error          TEXT,                -- why it failed, in one line, when it did
  workspace      TEXT,                -- path of the checked-out repo the harness worked in
  outcome        TEXT                 -- how the harness ended: finished | harness_error | timeout | budget_exceeded | no_calls
);
CREATE INDEX episodes_by_run ON episodes (run_id, round_id);

CREATE TABLE calls (
  -- Why: every model call an episode made, exactly as sent and received, with the token ids and
  -- logprobs vLLM reported: training rows are built from these ids, never by re-tokenising text.
  id               TEXT PRIMARY KEY,
  episode_id       TEXT NOT NULL REFERENCES episodes(id),
  seq              INTEGER NOT NULL,  -- 0, 1, 2, ... per episode, gapless; assigned under BEGIN IMMEDIATE
  protocol         TEXT NOT NULL,     -- openai-chat | anthropic-messages | openai-responses | other
  method           TEXT NOT NULL,
  path             TEXT NOT NULL,     -- after the /e/<episode> prefix, with the query string
  status           TEXT NOT NULL,     -- ok | partial | client_error | upstream_error | unreachable | ...
  http_status      INTEGER NOT NULL,  -- what the client got
  stream           INTEGER NOT NULL,  -- 0/1
  client_headers   TEXT NOT NULL,     -- JSON, without authorization / x-api-key
  -- Request bodies resend the whole conversation, so each is stored as a zstd frame that uses an
  -- earlier body of the same kind (`*_base_seq`, same episode) as raw-content dictionary: an episode's
  -- bytes grow about linearly. A NULL base is a keyframe (plain zstd); keyframes bound read cost.
  client_request             BLOB NOT NULL,
  client_request_size        INTEGER NOT NULL,  -- decoded length, checked on read
  client_request_base_seq    INTEGER,
  client_request_chain       INTEGER NOT NULL,  -- bodies decoded to read this one (1 = keyframe)
  client_request_chain_bytes INTEGER NOT NULL,  -- their total decoded bytes: the read cost
  upstream_request             BLOB,            -- what we sent to vLLM (translated, ids requested)
  upstream_request_size        INTEGER,
  upstream_request_base_seq    INTEGER,
  upstream_request_chain       INTEGER,
  upstream_request_chain_bytes INTEGER,
  response           BLOB,            -- zstd of what the client saw (streams: the full SSE bytes)
  response_size      INTEGER,
  upstream_response  BLOB,            -- zstd of vLLM's JSON (NULL for streams: ids are kept below)
  upstream_response_size INTEGER,
  -- Prompt ids of call n usually start with call n-1's prompt + completion: store a reference to that
  -- call and a prefix length into its (prompt + completion), plus only the new tail. O(new tokens).
  prompt_base_seq    INTEGER,         -- NULL: the tail is the whole prompt
  prompt_prefix_len  INTEGER,         -- tokens taken from the base call's prompt + completion
  prompt_tail        BLOB,            -- little-endian uint32 token ids
  prompt_len         INTEGER,         -- full prompt length, checked on read; NULL when ids are unknown
  completion_ids     BLOB,            -- little-endian uint32
  completion_logprobs BLOB,           -- little-endian float64, exactly as vLLM reported them
  finish_reason      TEXT,
  usage              TEXT,            -- JSON
  client_model       TEXT,            -- model name the client asked for
  model              TEXT,            -- policy / adapter name sent upstream
  sampling           TEXT,            -- JSON: temperature, top_p, max_tokens ... as sent upstream
  dropped            TEXT,            -- JSON: request fields translation dropped (recorded, not sent)
  started_at         REAL NOT NULL,
  first_byte_at      REAL,            -- time to first byte is the latency users feel
  ended_at           REAL NOT NULL,
  error              TEXT,
  UNIQUE (episode_id, seq)            -- also the index every per-episode read and the seq lookup use
);
"""

# No table changes: a request body's delta (`*_base_seq` not NULL) may now also be a splice frame, told
# from a zstd dictionary frame by its first byte (store/deltas.py). Why a migration at all: an alight that
# predates splice frames would misread them as zstd and fail on the first such body; the ledger row makes
# it refuse the file up front with "written by a newer alight". Earlier files read back unchanged.
M002_SPLICE_BODIES = """
-- Request-body deltas: splice frames (first byte 1 or 2: prefix/suffix lengths taken from the base body,
-- then the new middle bytes, raw or zstd) beside zstd raw-content-dictionary frames (first byte 0x28).
"""

# Training writes what it did, so `alight inspect` can draw loss curves and explain each round's data
# without re-running anything: one row per optimizer step and one summary per trained round.
M003_TRAINING = """
CREATE TABLE train_steps (
  -- Why: per optimizer step metrics of `alight train` / the training between rounds; the inspect view
  -- draws loss and reward curves from these, and a slow step (tokens/s) is visible after the fact.
  run_id        TEXT NOT NULL REFERENCES runs(id),
  round_idx     INTEGER NOT NULL,    -- the round whose episodes were trained on (its adapter comes next)
  step          INTEGER NOT NULL,    -- optimizer step within this round's training, 1, 2, ...
  loss          REAL,                -- the GRPO surrogate loss (not a progress metric on its own: on-policy
                                     -- it is minus the mean advantage of the batch)
  reward_mean   REAL,                -- mean reward of the episodes in the step's rows
  reward_std    REAL,
  clip_fraction REAL,                -- share of tokens whose ratio hit the PPO clip
  grad_norm     REAL,                -- before clipping
  tokens_per_s  REAL,                -- tokens forwarded (prompt + gap + completion) per wall second
  rows          INTEGER,             -- training rows in the step
  merged_calls  INTEGER,             -- calls those rows cover (rows < calls when prefixes merged)
  extra         TEXT,                -- JSON: every other metric the trainer logged (entropy, IS stats, lr, ...)
  at            REAL NOT NULL,       -- time.time() when the step ended
  PRIMARY KEY (run_id, round_idx, step)
);

CREATE TABLE train_rounds (
  -- Why: one summary per trained round: what went into the rows (and why calls did not merge), which
  -- groups were dropped, where the adapter went. Re-training a round replaces its row.
  run_id          TEXT NOT NULL REFERENCES runs(id),
  round_idx       INTEGER NOT NULL,
  rows            INTEGER NOT NULL,  -- training rows after merging and dropping
  calls           INTEGER NOT NULL,  -- calls those rows cover: calls / rows = calls per row
  steps           INTEGER NOT NULL,  -- optimizer steps taken
  seconds         REAL NOT NULL,     -- wall time of the whole training (loading, steps, saving)
  merge_rule      TEXT NOT NULL,     -- strict | splice (train.merge)
  break_reasons   TEXT NOT NULL,     -- JSON {template|retokenised|edited|other: count}: why calls did not merge
  dropped         TEXT NOT NULL,     -- JSON counts: zero-variance groups, over-long rows, error calls,
                                     -- retried prompts, outcomes not trained, episodes without reward ...
  adapter_dir     TEXT,              -- where the trained adapter was written
  base_adapter    TEXT,              -- the adapter training continued from (NULL: a fresh LoRA)
  chat_template   TEXT,              -- serve.chat_template choice the round's calls were served with
  detail          TEXT,              -- JSON: settings used (lr, rank, ...), anything else worth keeping
  finished_at     REAL NOT NULL,
  PRIMARY KEY (run_id, round_idx)
);
"""

# Browsing (`alight inspect list`, the episode table) sums calls, failures and tokens per episode. Those
# columns sit after the bodies in a calls row, so reading them walked every row's overflow pages: ~4 µs a
# call, 1 s for 200,000 calls. A covering index holds them in ~60 bytes per call (~10x faster to scan);
# completion_len is new because an index cannot hold length(completion_ids) as a readable value here
# (SQLite < 3.41 does not read expression indexes as covering). The writer fills it (store/calls.py).
M004_CALL_SUMMARY_INDEX = """
ALTER TABLE calls ADD COLUMN completion_len INTEGER /* sampled tokens: length of completion_ids, NULL if unknown */;
UPDATE calls SET completion_len = length(completion_ids) / 4 WHERE completion_ids IS NOT NULL;
CREATE INDEX calls_summary ON calls (
  -- Lists read per-episode counts, failures, token totals and times from this index alone.
  episode_id, status, prompt_len, completion_len, started_at, ended_at
);
"""

# Even from the covering index, summing 200,000 calls per list costs ~0.2 s, and a list is what a user waits
# for. The sums are kept per episode as calls are inserted (calls are never updated or deleted, so a trigger
# keeps them exact whichever process writes), and a list reads one short row per episode.
M005_EPISODE_CALL_STATS = """
CREATE TABLE episode_call_stats (
  -- Why: what an episode list shows about each episode's calls, kept as they are written (trigger below).
  episode_id        TEXT PRIMARY KEY REFERENCES episodes(id),
  calls             INTEGER NOT NULL,
  failed_calls      INTEGER NOT NULL,  -- calls whose status is not ok
  prompt_tokens     INTEGER NOT NULL,  -- summed prompt_len (NULL counts 0)
  completion_tokens INTEGER NOT NULL,  -- summed completion_len (NULL counts 0)
  first_call_at     REAL,              -- earliest started_at
  last_call_at      REAL               -- latest ended_at
) WITHOUT ROWID;
INSERT INTO episode_call_stats
SELECT episode_id, COUNT(*), SUM(status != 'ok'), SUM(COALESCE(prompt_len, 0)), SUM(COALESCE(completion_len, 0)),
       MIN(started_at), MAX(ended_at)
FROM calls WHERE true GROUP BY episode_id;
CREATE TRIGGER calls_add_to_episode_stats AFTER INSERT ON calls BEGIN
  INSERT INTO episode_call_stats VALUES (NEW.episode_id, 1, NEW.status != 'ok', COALESCE(NEW.prompt_len, 0),
                                         COALESCE(NEW.completion_len, 0), NEW.started_at, NEW.ended_at)
  ON CONFLICT (episode_id) DO UPDATE SET
    calls = calls + 1, failed_calls = failed_calls + excluded.failed_calls,
    prompt_tokens = prompt_tokens + excluded.prompt_tokens,
    completion_tokens = completion_tokens + excluded.completion_tokens,
    first_call_at = min(first_call_at, excluded.first_call_at), last_call_at = max(last_call_at, excluded.last_call_at);
END;
"""

# What the runner saw of an episode besides its ending (EpisodeOutcome.detail): the sandbox it ran in, its peak
# use, how it reached the proxy, leftover processes killed. Kept so the evidence of what the sandbox did outlives
# the run, and a summary reports the sandbox the episodes ran under rather than today's setting.
M006_EPISODE_OUTCOME_DETAIL = """
ALTER TABLE episodes ADD COLUMN outcome_detail TEXT /* JSON: sandbox {mode, peak, proxy} or "none", leftover_processes_killed */;
"""

# The agent's changes as a git patch, one row per episode (store/patches.py): what a SWE-bench prediction
# submits. Its own table so that episode lists never read patch bytes.
M007_EPISODE_PATCHES = """
CREATE TABLE episode_patches (
  -- Why: the agent's diff against the workspace it was given (after setup, before the hidden files), exactly
  -- as it would be submitted; kept after the workspace is deleted.
  episode_id  TEXT PRIMARY KEY REFERENCES episodes(id),
  patch       BLOB,              -- git diff --binary bytes; empty: no change; NULL: not made or over the limit
  files       INTEGER NOT NULL,  -- files the patch touches
  size        INTEGER NOT NULL,  -- its length in bytes (also when it was too large to keep)
  error       TEXT,              -- why there is no patch
  at          REAL NOT NULL
) WITHOUT ROWID;
"""

# Evaluation inside `alight run --rounds N --eval-task-set F` (issue 35): the held-out set runs before round 0 and
# after trainings, with the adapter just trained. Its episodes need a round (episodes.round_id: the policy they were
# sampled from, resume by slot), but they must never be trained on, so the round says what it is for: `kind`. An
# evaluation round takes the idx of the training round whose policy it evaluates (idx n: the adapter after n
# trainings), so the two kinds each get their own index space; UNIQUE (run_id, idx) of m001 forbids that, and a
# table constraint cannot be dropped in SQLite, so the table is rebuilt (the documented 12-step way: the old one
# renamed away with legacy_alter_table ON, so the episodes' REFERENCES rounds(id) keep naming `rounds` and reach
# the new table; apply_migrations runs every migration with foreign keys off and checks them before COMMIT).
# Every reader that trains or summarises train reward asks for kind 'train' (Store.list_rounds' default).
M008_EVALUATION_ROUNDS = """
PRAGMA legacy_alter_table = ON;
ALTER TABLE rounds RENAME TO rounds_m001;
CREATE TABLE rounds (
  -- Why: training happens between rounds; every episode of a round is sampled from one policy, and
  -- the trainer must know which adapter produced the logprobs it uses for importance weights.
  -- Evaluation rounds (kind 'eval') hold held-out episodes that are never trained on.
  id            TEXT PRIMARY KEY,
  run_id        TEXT NOT NULL REFERENCES runs(id),
  kind          TEXT NOT NULL DEFAULT 'train' CHECK (kind IN ('train', 'eval')),
                                      -- train: its episodes are trained on; eval: a held-out evaluation, never
  idx           INTEGER NOT NULL,     -- train: 0, 1, 2, ... within the run; eval: the trainings behind its policy
  policy        TEXT NOT NULL,        -- adapter name served by vLLM, e.g. policy-r0
  adapter_path  TEXT,                 -- where that adapter lives on disk (NULL: the zero-initialised one)
  status        TEXT NOT NULL,        -- running | done | failed
  started_at    REAL NOT NULL,
  ended_at      REAL,
  UNIQUE (run_id, kind, idx)
);
INSERT INTO rounds (id, run_id, kind, idx, policy, adapter_path, status, started_at, ended_at)
  SELECT id, run_id, 'train', idx, policy, adapter_path, status, started_at, ended_at FROM rounds_m001;
DROP TABLE rounds_m001;
PRAGMA legacy_alter_table = OFF;
"""

# Exact continuation (issue 34, proxy.continuation: exact): a call's prompt is no longer the plain render of its
# messages but the conversation's earlier prompt + the ids the model sampled + the new turns. What the proxy decided
# for the call (continue / fork / start / fallback, the reason, the chain, the normalisations that fired, where the
# prompt differs from the plain render, the sampled spans to train and the parent's spans to mask) and the sampling
# params sent to vLLM's generate are kept with it, so `alight inspect` can show why a prompt is what it is and the
# trainer can mask what a fork's parent already trains. NULL: a call under `render` (or recorded before).
M009_CALL_CONTINUATION = """
ALTER TABLE calls ADD COLUMN continuation TEXT /* JSON: {mode, kind, reason, chain, parent, sampled_spans, masked_spans, normalisations, shared_messages, mismatch, differs, first_difference, plain_len, sampling_params} */;
"""

# (name, why, sql). Names sort in apply order; the table records which ran.
MIGRATIONS: list[tuple[str, str, str]] = [
    ("m001_initial", "runs, rounds, episodes and calls with delta-encoded token ids and bodies", M001_INITIAL),
    ("m002_splice_bodies", "no table change: request-body deltas may also be splice frames (common prefix and"
     " suffix with the base body + the new middle bytes), which older alight versions cannot read",
     M002_SPLICE_BODIES),
    ("m003_training", "per-step training metrics and per-round training summaries", M003_TRAINING),
    ("m004_call_summary_index", "calls.completion_len and a covering index, so episode lists with call counts"
     " and token totals read no call bodies", M004_CALL_SUMMARY_INDEX),
    ("m005_episode_call_stats", "per-episode call counts, failures, token totals and first/last call times, kept"
     " by a trigger as calls are inserted, so an episode list reads one row per episode", M005_EPISODE_CALL_STATS),
    ("m006_episode_outcome_detail", "episodes.outcome_detail: the sandbox an episode ran in (mode, peak use, how it"
     " reached the proxy) and leftover processes killed, as the runner saw them", M006_EPISODE_OUTCOME_DETAIL),
    ("m007_episode_patches", "episode_patches: the agent's changes to its workspace as a git patch, one row per"
     " episode, for inspect and SWE-bench predictions", M007_EPISODE_PATCHES),
    ("m008_evaluation_rounds", "rounds.kind: train, or eval (held-out evaluation rounds, never trained on), each kind"
     " with its own idx; the table rebuilt for UNIQUE (run_id, kind, idx)", M008_EVALUATION_ROUNDS),
    ("m009_call_continuation", "calls.continuation: what exact continuation decided for a call (continue, fork,"
     " start or fallback, why, the chain, normalisations, spans) and the sampling params sent", M009_CALL_CONTINUATION),
]

_LEDGER = """
CREATE TABLE IF NOT EXISTS _alight_migrations (
  -- Why: which named migrations this file has had, so opening applies only the missing ones.
  name        TEXT PRIMARY KEY,
  applied_at  REAL NOT NULL
)
"""


def split_statements(sql: str) -> list[str]:
    """Split a script into statements so they run inside our own transaction (executescript commits)."""
    statements, current = [], ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip() and not current.strip().startswith("--"):
        raise ValueError(f"incomplete SQL statement in migration: {current.strip()[:80]}")
    return statements


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply missing migrations in one BEGIN IMMEDIATE transaction; returns the names applied.

    Two processes opening a fresh file at once serialise on the write lock; the second sees the ledger
    rows the first committed and applies nothing. An up-to-date file is only read: no write lock is taken,
    so opening never waits for a busy writer (and works on a read-only copy).
    """
    if _applied(conn) == {name for name, _, _ in MIGRATIONS}:
        return []
    # Foreign keys off while migrating (SQLite can only switch them outside a transaction): a migration that
    # rebuilds a parent table (m008) drops it while children still point at it; foreign_key_check below stops a
    # migration that would leave a dangling reference.
    keys_on = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        return _apply(conn)
    finally:
        conn.execute(f"PRAGMA foreign_keys = {'ON' if keys_on else 'OFF'}")


def _apply(conn: sqlite3.Connection) -> list[str]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_LEDGER)
        done = {row[0] for row in conn.execute("SELECT name FROM _alight_migrations")}
        known = {name for name, _, _ in MIGRATIONS}
        unknown = sorted(done - known)
        if unknown:
            raise AlightError(
                f"this database has migrations this alight does not know: {', '.join(unknown)}",
                hint="it was written by a newer alight; upgrade with `pip install -U agentlightning-cli`",
            )
        applied = []
        for name, _, sql in MIGRATIONS:
            if name in done:
                continue
            for statement in split_statements(sql):
                conn.execute(statement)
            conn.execute("INSERT INTO _alight_migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
            applied.append(name)
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise AlightError(f"migrating {len(broken)} row(s) would leave a dangling reference "
                              f"(first: {tuple(broken[0])})",
                              hint="this database is damaged; restore it from a copy")
        conn.execute("COMMIT")
        return applied
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _applied(conn: sqlite3.Connection) -> set[str] | None:
    has_ledger = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_alight_migrations'"
    ).fetchone()
    return {row[0] for row in conn.execute("SELECT name FROM _alight_migrations")} if has_ledger else None
