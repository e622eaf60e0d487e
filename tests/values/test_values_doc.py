"""docs/values.md's opening says what ``kbatch.values`` decodes: every schema type the decoder
dispatches on, none promised for later (issue 35 item 10d: "Protobuf is to follow" while it worked)."""

from __future__ import annotations

import re

from support.tree import source_file

from kbatch.values import _decode


def test_the_opening_names_every_language_decoded_and_promises_none() -> None:
    text = source_file("docs/values.md").read_text()
    opening = " ".join(text.split("\n## ", 1)[0].split())
    said = opening.split("decodes ", 1)[1].split(" into typed Arrow columns")[0]
    for kind in _decode._FORMAT_OF:  # the schemaTypes values.decode dispatches on
        name = {"AVRO": "Avro", "JSON": "JSON Schema", "PROTOBUF": "Protobuf"}[kind]
        assert name in said, (kind, said)
    assert not re.search(r"to follow|not yet|later", opening), opening
