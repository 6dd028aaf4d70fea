"""Requests that are not valid protobuf are refused as INVALID_ARGUMENT naming the message type.

gRPC's own deserialisation answers INTERNAL "Exception deserializing request!" naming nothing,
and logs a traceback for every such call. `WireGuardInterceptor` takes the request bytes as
they came, parses them inside the handler, and refuses a corrupt one with one line:
`request is not a valid graphtier.v1.LoadDatasetRequest (64 bytes): ...`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

_Parse = Callable[[bytes], Any]


def _raw(data: bytes) -> bytes:
    return data


def _type_name(parse: _Parse) -> str:
    owner = getattr(parse, "__self__", None)  # `Message.FromString` is a classmethod bound to the type
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return descriptor.full_name if descriptor is not None else "request message"


def _parsed(parse: _Parse, data: bytes, context: grpc.ServicerContext) -> Any:
    try:
        return parse(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        problem = " ".join(str(exc).split())[:200]
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"request is not a valid {_type_name(parse)} ({len(data)} bytes): {problem or 'wire format corrupt'}",
        )
        raise  # unreachable: abort raises


class WireGuardInterceptor(grpc.ServerInterceptor):
    """Moves request parsing into the handler, where a corrupt request can be refused by name."""

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse: _Parse = handler.request_deserializer
        serialize = handler.response_serializer

        def one(behaviour: Callable[..., Any]) -> Callable[..., Any]:
            def call(request: bytes, context: grpc.ServicerContext) -> Any:
                return behaviour(_parsed(parse, request, context), context)

            return call

        def many(behaviour: Callable[..., Any]) -> Callable[..., Any]:
            def call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
                return behaviour((_parsed(parse, r, context) for r in requests), context)

            return call

        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(one(handler.unary_unary), _raw, serialize)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(one(handler.unary_stream), _raw, serialize)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(many(handler.stream_unary), _raw, serialize)
        return grpc.stream_stream_rpc_method_handler(many(handler.stream_stream), _raw, serialize)
