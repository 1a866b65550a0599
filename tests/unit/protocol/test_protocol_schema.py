"""The committed pulsar_api_pb2 matches pulsar_api.proto, and the schema carries Pulsar's field numbers.

The field numbers below are those of Pulsar's PulsarApi.proto (pulsar-client-cpp v4.2.0), written out again
and checked independently of how the module was generated; the full descriptor comparison uses protoc from
grpcio-tools (a test dependency: only the .proto's parse is compared, so any protoc version will do).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

from magnetar.protocol import pulsar_api_pb2 as pb

_SRC = pathlib.Path(pb.__file__).resolve().parents[2]
_PROTO = "magnetar/protocol/pulsar_api.proto"


def _without_json_names(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    # Newer protoc writes json_name into descriptor sets, older ones do not; it is derived from the field
    # name and never reaches the wire.
    def clear(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
        for message in messages:
            for field in message.field:
                field.ClearField("json_name")
            clear(message.nested_type)

    clear(file.message_type)
    return file


def test_committed_module_matches_the_proto(tmp_path: pathlib.Path) -> None:
    from grpc_tools import protoc

    out = tmp_path / "set.pb"
    assert protoc.main(["protoc", f"-I{_SRC}", f"--descriptor_set_out={out}", str(_SRC / _PROTO)]) == 0
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    committed = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    assert _without_json_names(committed) == _without_json_names(fresh), "run `make proto`"


@pytest.mark.parametrize(
    ("message", "numbers"),
    [
        (
            pb.MessageIdData,
            {"ledgerId": 1, "entryId": 2, "partition": 3, "batch_index": 4, "ack_set": 5, "batch_size": 6},
        ),
        (pb.CommandConnect, {"client_version": 1, "auth_method_name": 5, "protocol_version": 4, "feature_flags": 10}),
        (pb.CommandConnected, {"server_version": 1, "protocol_version": 2, "max_message_size": 3}),
        (pb.CommandSubscribe, {"subType": 3, "consumer_id": 4, "start_message_id": 9, "keySharedMeta": 17}),
        (pb.KeySharedMeta, {"keySharedMode": 1, "hashRanges": 3, "allowOutOfOrderDelivery": 4}),
        (pb.CommandSend, {"producer_id": 1, "sequence_id": 2, "num_messages": 3, "highest_sequence_id": 6}),
        (pb.CommandMessage, {"consumer_id": 1, "message_id": 2, "redelivery_count": 3, "ack_set": 4}),
        (pb.CommandAck, {"ack_type": 2, "message_id": 3, "validation_error": 4, "request_id": 8}),
        (pb.CommandLookupTopicResponse, {"brokerServiceUrl": 1, "response": 3, "request_id": 4, "error": 6}),
        (pb.CommandPartitionedTopicMetadataResponse, {"partitions": 1, "request_id": 2, "response": 3, "error": 4}),
        (
            pb.MessageMetadata,
            {
                "producer_name": 1,
                "publish_time": 3,
                "partition_key": 6,
                "num_messages_in_batch": 11,
                "partition_key_b64_encoded": 17,
                "ordering_key": 18,
                "deliver_at_time": 19,
                "marker_type": 20,
                "highest_sequence_id": 24,
                "null_partition_key": 30,
            },
        ),
        (pb.SingleMessageMetadata, {"partition_key": 2, "payload_size": 3, "ordering_key": 7, "sequence_id": 8}),
        (pb.BrokerEntryMetadata, {"broker_timestamp": 1, "index": 2}),
        (pb.CommandConsumerStats, {"request_id": 1, "consumer_id": 4}),
    ],
)
def test_field_numbers_are_pulsars(message: type[Message], numbers: dict[str, int]) -> None:
    fields = message.DESCRIPTOR.fields_by_name
    assert {name: fields[name].number for name in numbers} == numbers


def test_every_command_type_has_the_field_of_its_number() -> None:
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_number
    for value in pb.BaseCommand.Type.DESCRIPTOR.values:
        assert value.number in fields, value.name
        assert fields[value.number].message_type is not None, value.name
    assert fields[pb.BaseCommand.LOOKUP].name == "lookupTopic"
    assert fields[pb.BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES].name == "redeliverUnacknowledgedMessages"


def test_enum_values_are_pulsars() -> None:
    assert pb.ServerError.Value("ChecksumError") == 9
    assert pb.ServerError.Value("ConsumerAssignError") == 19
    assert pb.ServerError.Value("NotAllowedError") == 22
    assert pb.ServerError.Value("ProducerFenced") == 25
    assert pb.CommandSubscribe.Key_Shared == 3
    assert pb.STICKY == 1
    assert pb.Schema.ProtobufNative == 20
    assert pb.BaseCommand.TOPIC_MIGRATED == 68
    assert pb.MessageIdData().partition == -1
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.MessageMetadata().num_messages_in_batch == 1
