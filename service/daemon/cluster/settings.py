"""`ClusterConfig`: who this daemon's peers are and how it talks to them (the `cluster:` section
of the daemon config; `--peer`, `--peers-file`, `--node-name`, `--advertise`, `--peer-ca`,
`--peer-timeout` on the command line).

Peers are HOST:PORT addresses of other daemons' TCP listeners, given one by one or in a hosts
file (one address per line, `#` comments; the line naming this daemon itself is skipped, so
every node can share one file). Daemons call each other with the cluster's token (each node's
`token_file` holds the same token) over TLS, trusting `peer_ca` (default: this daemon's own TLS
certificate, which works when every node serves the same certificate or one signed by it).
Light on purpose: no grpc, no torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from graphtier.contract.options import Flag

DEFAULT_PEER_TIMEOUT_S = 15.0


def parse_peer(text: str, *, what: str = "peer") -> tuple[str, int]:
    """`HOST:PORT` with a port in 1..65535 -> (host, port); ValueError naming `what` and the value."""
    host, sep, port_text = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise ValueError(f"{what} {text!r} must be HOST:PORT with a port in 1..65535 (another daemon's --tcp)")
    return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """HOST:PORT, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def read_hosts_file(path: Path) -> list[str]:
    """The addresses of a hosts file, in order; ValueError naming the file and line when one is bad."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"peers_file {str(path)!r}: cannot read it ({exc.strerror or exc})") from None
    peers = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            peers.append(format_address(*parse_peer(text, what=f"{path}:{number}: peer")))
        except ValueError as exc:
            raise ValueError(str(exc)) from None
    return peers


class ClusterConfig(BaseModel):
    """The daemon's peers and its name among them; empty = a one-node daemon."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="This node's name in the cluster (`job submit --nodes`, `cluster status`); default its address.",
    )
    advertise: Annotated[str | None, Flag(metavar="HOST:PORT")] = Field(
        default=None, description="HOST:PORT peers reach this daemon at; default the TCP listen address."
    )
    peers: Annotated[
        list[str],
        Flag(
            "--peer",
            metavar="HOST:PORT",
            help="Another daemon of the cluster (its TCP address); repeat for each.",
            repeat=True,
        ),
    ] = Field(default_factory=list, max_length=1024, description="Other daemons' TCP HOST:PORT addresses.")
    peers_file: Path | None = Field(
        default=None, description="A hosts file: one HOST:PORT per line, '#' comments; this node's own line is skipped."
    )
    peer_ca: Path | None = Field(
        default=None, description="PEM certificate(s) to trust for peers' TLS; default this daemon's TLS certificate."
    )
    peer_timeout_s: float = Field(
        default=DEFAULT_PEER_TIMEOUT_S,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="Seconds a peer may not answer (or a multi-node rendezvous stay incomplete) before a job "
        "spanning it fails naming it.",
    )

    @field_validator("peers")
    @classmethod
    def _check_peers(cls, peers: list[str]) -> list[str]:
        return [format_address(*parse_peer(p)) for p in peers]

    @field_validator("advertise")
    @classmethod
    def _check_advertise(cls, address: str | None) -> str | None:
        return None if address is None else format_address(*parse_peer(address, what="advertise"))

    @field_validator("peers_file", "peer_ca")
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        return None if path is None else Path(os.path.abspath(path.expanduser()))

    @field_validator("peers_file")
    @classmethod
    def _check_file(cls, path: Path | None) -> Path | None:
        if path is not None:
            read_hosts_file(path)
        return path

    @property
    def enabled(self) -> bool:
        """True when any peer is configured."""
        return bool(self.peers or self.peers_file)

    def peer_addresses(self, own: str | None) -> list[str]:
        """Every peer once, in order (`peers` first, then the hosts file), without `own`."""
        listed = [*self.peers, *(read_hosts_file(self.peers_file) if self.peers_file else [])]
        seen: list[str] = []
        for address in listed:
            if address != own and address not in seen:
                seen.append(address)
        return seen
