"""tgprobe.py: Telethon's first MTProto message (req_pq_multi) via MTProxy or plain obfuscated2."""
import asyncio
import logging
import os

from telethon.network.connection import (
    ConnectionTcpMTProxyAbridged,
    ConnectionTcpMTProxyIntermediate,
    ConnectionTcpMTProxyRandomizedIntermediate,
    ConnectionTcpObfuscated,
)
from telethon.network.connection.tcpintermediate import (
    IntermediatePacketCodec,
    RandomizedIntermediatePacketCodec,
)
from telethon.network.mtprotoplainsender import MTProtoPlainSender
from telethon.tl.functions import ReqPqMultiRequest
from telethon.tl.types import ResPQ

# Telethon's MTProxy classes by the obfuscated2 tag each one sends.
MTPROXY_CLASSES = {
    "ef": ConnectionTcpMTProxyAbridged,
    "ee": ConnectionTcpMTProxyIntermediate,
    "dd": ConnectionTcpMTProxyRandomizedIntermediate,
}


class _ObfuscatedIntermediate(ConnectionTcpObfuscated):
    packet_codec = IntermediatePacketCodec


class _ObfuscatedPadded(ConnectionTcpObfuscated):
    packet_codec = RandomizedIntermediatePacketCodec


# Telethon's plain obfuscated2 (no secret, raw keys: a client talking to a DC directly).
OBFUSCATED_CLASSES = {
    "ef": ConnectionTcpObfuscated,
    "ee": _ObfuscatedIntermediate,
    "dd": _ObfuscatedPadded,
}


class Loggers(dict):
    """The logger mapping Telethon's network classes expect."""

    def __missing__(self, key):
        return logging.getLogger(key)


def nonce_hex(nonce):
    """The nonce as it appears on the wire (int128, little-endian), in hex."""
    return nonce.to_bytes(16, "little", signed=True).hex()


async def _req_pq(conn, timeout):
    await asyncio.wait_for(conn.connect(timeout=timeout), timeout + 5)
    try:
        nonce = int.from_bytes(os.urandom(16), "little", signed=True)
        sender = MTProtoPlainSender(conn, loggers=Loggers())
        res = await asyncio.wait_for(sender.send(ReqPqMultiRequest(nonce)), timeout)
        return nonce, res
    finally:
        await conn.disconnect()


def req_pq_via_proxy(tag, proxy_port, secret, dc_id, timeout=10):
    """Telethon MTProxy connection to 127.0.0.1:proxy_port; returns (nonce, ResPQ)."""
    cls = MTPROXY_CLASSES[tag]
    # The first two arguments would be the DC's address; the MTProxy classes replace them
    # with the proxy's, and we pass loopback anyway so nothing else could ever be dialed.
    conn = cls("127.0.0.1", proxy_port, dc_id, loggers=Loggers(),
               proxy=("127.0.0.1", proxy_port, secret))
    return asyncio.run(_req_pq(conn, timeout))


def req_pq_direct(tag, dc_port, timeout=10):
    """Telethon obfuscated2 straight to a fake DC on 127.0.0.1:dc_port."""
    conn = OBFUSCATED_CLASSES[tag]("127.0.0.1", dc_port, 2, loggers=Loggers())
    return asyncio.run(_req_pq(conn, timeout))


__all__ = ["req_pq_via_proxy", "req_pq_direct", "nonce_hex", "ResPQ", "MTPROXY_CLASSES"]
