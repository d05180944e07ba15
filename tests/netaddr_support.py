"""This machine's own non-loopback address, for tests of what listens beyond loopback. Found from the machine's
own interface list (`hostname -I`, then the host name's addresses), never by sending anything; an address counts
only if a socket can bind to it (so it is this machine's). Tests send to it and nowhere else.

A machine with no such address (a bare container): `rerun_in_netns` runs the test again inside a user + network
namespace it makes, with 192.0.2.1 (TEST-NET-1, never routed) added to that namespace's own `lo` (a dummy
interface needs a kernel module a container may lack), where the whole test (server and client) runs.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import urllib.request

NETNS_MARK = "NETADDR_TEST_IN_NETNS"
NETNS_ADDRESS = "192.0.2.1"
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""urllib without HTTP_PROXY: a request to this machine's address goes straight to it."""


def _bindable(address: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
        except OSError:
            return False
    return True


def own_address() -> str | None:
    """A non-loopback IPv4 address of this machine, or None."""
    if os.environ.get(NETNS_MARK):
        return NETNS_ADDRESS
    if os.environ.get("NETADDR_TEST_NO_OWN_ADDRESS"):  # to exercise the namespace path on a machine that has one
        return None
    try:
        listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        listed = []
    try:
        listed += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    except OSError:
        pass
    for candidate in listed:
        try:
            ip = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        if ip.version == 4 and not ip.is_loopback and not ip.is_link_local and _bindable(candidate):
            return candidate
    return None


def rerun_in_netns(nodeid: str) -> subprocess.CompletedProcess:
    """Run pytest on `nodeid` inside a fresh user + network namespace holding NETNS_ADDRESS."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        raise AssertionError("this machine has no non-loopback address and no `unshare`/`ip` to make one")
    script = (f"ip link set lo up && ip addr add {NETNS_ADDRESS}/32 dev lo && "
              f"exec {sys.executable} -m pytest -x -q -p no:cacheprovider '{nodeid}'")
    return subprocess.run(["unshare", "--user", "--map-root-user", "--net", "sh", "-c", script],
                          env={**os.environ, NETNS_MARK: "1"}, capture_output=True, text=True, timeout=900)
