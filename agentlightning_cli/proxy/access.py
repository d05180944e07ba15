"""Who may call the proxy for an episode: its key, the run token that admits new episodes, and keys that end.

- Every episode has one key (a SHA-256 digest is kept, never the key). `alight run` makes a random key per
  episode and registers it before the harness starts; `alight serve` / `alight proxy` (ad hoc) take the first key
  an unknown episode id presents as that episode's key.
- Ad-hoc creation beyond loopback needs the run token. On loopback only this machine's users reach the proxy;
  on any other address (0.0.0.0 included) anyone on the network could otherwise add training data to the run
  by inventing an episode id. So a proxy listening there makes (or is given, `proxy.run_token`) a run token, shows
  it in its banner, and creates an episode only for a key that is the token or starts with `<token>.`: the
  suffix names the client's own episode key (`<token>.mini-1`), and the whole presented string becomes the key.
- A key stops working when its episode ends (finished, timed out, cancelled, abandoned): a process the harness
  left behind, or anyone who saw the key, gets 403 and nothing is recorded. An episode another process ended
  (its row in the store no longer pending or running) is refused the same way.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import secrets
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from agentlightning_cli.store import Store

ENDED = b""
"""The registry's mark of an ended episode: no digest equals it, and it stops the look-up in the store."""
LIVE_STATUSES = ("pending", "running")
TOKEN_PREFIX = "rt-"


@functools.lru_cache(maxsize=1024)
def key_digest(key: str) -> bytes:
    # Cached: every request presents its episode's key again, and hashing it each time costs more than the lookup.
    return hashlib.sha256(key.encode()).digest()


def new_run_token() -> str:
    """A fresh run token: 144 random bits, URL-safe, no '.' (the separator of `<token>.<suffix>` keys)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(18)


def carries_token(key: str, token: str) -> bool:
    """Whether `key` is the run token or `<token>.<anything>`; compared in constant time."""
    head = key if len(key) <= len(token) else key[:len(token)]
    rest = key[len(token):]
    return hmac.compare_digest(head.encode(), token.encode()) and (rest == "" or rest.startswith("."))


class EpisodeKeys:
    """The proxy's registry of episode keys. Verdicts: 'ok', 'denied' (wrong or no key), 'unknown' (no such
    episode), 'ended' (its episode ended), 'no_token' (ad-hoc creation without the run token). Nothing is written
    for any verdict but 'ok'."""

    def __init__(self, store: Store, create: Callable[[str, str], Any] | None, run_token: str | None = None):
        self.store = store
        self._create = create
        """Ad hoc: makes the episode row (episode id, key) and returns a future; None: no episode is made here."""
        self.run_token = run_token
        self._digests: dict[str, bytes] = {}
        self._lock = asyncio.Lock()

    def register(self, episode_id: str, key: str) -> None:
        self._digests[episode_id] = key_digest(key)

    def end(self, episode_id: str) -> None:
        self._digests[episode_id] = ENDED

    def ended(self, episode_id: str) -> bool:
        return self._digests.get(episode_id) is ENDED

    async def check(self, episode_id: str, key: str | None) -> str:
        digest = self._digests.get(episode_id)
        if digest is ENDED:
            return "ended"
        if digest is not None:
            return "ok" if key and hmac.compare_digest(key_digest(key), digest) else "denied"
        if self._create is None:
            return await self._look_up(episode_id, key)
        async with self._lock:  # concurrent first requests must not race the creation
            return await self._look_up(episode_id, key)

    async def _look_up(self, episode_id: str, key: str | None) -> str:
        """Registry miss: ask the store (episodes another process created), else create one in ad-hoc mode."""
        if episode_id in self._digests:
            return await self.check(episode_id, key)
        stored = await asyncio.to_thread(self.store.get_episode, episode_id)
        if stored is not None:
            if key is None or not await asyncio.to_thread(self.store.check_episode_key, episode_id, key):
                return "denied"
            if stored.status not in LIVE_STATUSES:
                self._digests[episode_id] = ENDED
                return "ended"
            self.register(episode_id, key)
            return "ok"
        if self._create is None:
            return "unknown"
        if not key:
            return "denied"
        if self.run_token is not None and not carries_token(key, self.run_token):
            return "no_token"
        await asyncio.wrap_future(self._create(episode_id, key))
        self.register(episode_id, key)
        return "ok"
