"""The byte-level BPE tokenizer: reference ids, both file forms, and streaming that never splits a character."""

import json
import re

import numpy as np
import pytest

from hf_checkpoints import SHARED_GPT2, make_tokenizer_json, requires_gpt2_tokenizer
from gpt2block.tokenizer import Tokenizer, TokenizerError, byte_to_unicode

MULTIBYTE = "Hello 🤖 世界! naïve café — 👩‍👩‍👧 ok, Ünïcödé ∑ x² 日本語のテキスト 🎉🎉"

# REFERENCE.md and ../shared/gpt2/SOURCE.md
REFERENCE_IDS = {
    "Hello world": [15496, 995],
    " Hello, I'm a language model,": [18435, 11, 314, 1101, 257, 3303, 2746, 11],
    "The meaning of life is": [464, 3616, 286, 1204, 318],
    "hello <|endoftext|>": [31373, 220, 50256],
    "<|endoftext|>": [50256],
}


@pytest.fixture(scope="module")
def gpt2_tok():
    return Tokenizer.from_dir(SHARED_GPT2)


@pytest.fixture(scope="module")
def small_tok():
    return Tokenizer.from_json_str(make_tokenizer_json(512))


def stream(tok, ids):
    d = tok.stream_decoder()
    pieces = [d.push(i) for i in ids]
    return pieces, d.flush()


@requires_gpt2_tokenizer
@pytest.mark.parametrize("text", list(REFERENCE_IDS))
def test_reference_ids(gpt2_tok, text):
    assert gpt2_tok.encode(text) == REFERENCE_IDS[text]
    assert gpt2_tok.decode(REFERENCE_IDS[text]) == text


@requires_gpt2_tokenizer
def test_gpt2_facts(gpt2_tok):
    assert gpt2_tok.eot_id == 50256 and gpt2_tok.vocab_size == 50257
    assert gpt2_tok.encode("") == []


@requires_gpt2_tokenizer
def test_vocab_merges_equal_tokenizer_json(gpt2_tok):
    vm = Tokenizer.from_vocab_merges(SHARED_GPT2 / "vocab.json", SHARED_GPT2 / "merges.txt")
    assert (vm.eot_id, vm.vocab_size) == (50256, 50257)
    for text in [*REFERENCE_IDS, MULTIBYTE, "  leading spaces\n\nand\ttabs  ", "x" * 300]:
        assert vm.encode(text) == gpt2_tok.encode(text), text
    ids = gpt2_tok.encode(MULTIBYTE)
    assert vm.decode(ids) == MULTIBYTE


@requires_gpt2_tokenizer
def test_stream_multibyte_gpt2(gpt2_tok):
    ids = gpt2_tok.encode(MULTIBYTE)
    pieces, tail = stream(gpt2_tok, ids)
    assert "".join(pieces) + tail == MULTIBYTE
    assert tail == ""
    assert "" in pieces  # some character really was split across tokens, and held back
    for p in pieces:
        assert "\ufffd" not in p  # never half a character
        p.encode("utf-8")  # whole characters only (a lone surrogate would fail here)


@requires_gpt2_tokenizer
def test_stream_equals_decode_on_random_ids(gpt2_tok):
    """Random ids (invalid UTF-8 included) stream to exactly what decode gives all at once."""
    rng = np.random.default_rng(0)
    table = gpt2_tok.token_bytes()
    high = [i for i, b in enumerate(table) if any(x >= 0x80 for x in b)]  # bytes of multibyte characters
    for _ in range(300):
        ids = rng.choice(high if rng.random() < 0.7 else gpt2_tok.vocab_size, size=rng.integers(1, 12)).tolist()
        pieces, tail = stream(gpt2_tok, ids)
        assert "".join(pieces) + tail == gpt2_tok.decode(ids), ids


@requires_gpt2_tokenizer
def test_stream_one_byte_at_a_time(gpt2_tok):
    """Each byte its own token: a 4-byte emoji comes out only with its last byte."""
    table = gpt2_tok.token_bytes()
    single = {t[0]: i for i, t in enumerate(table) if len(t) == 1}
    assert len(single) == 256
    emoji = "🤖".encode("utf-8")
    d = gpt2_tok.stream_decoder()
    assert [d.push(single[b]) for b in emoji] == ["", "", "", "🤖"]
    assert d.push(single[0xE4]) == ""  # half a CJK character at the end of generation
    assert d.flush() == "\ufffd"


def test_small_tokenizer_shape(small_tok):
    assert small_tok.vocab_size == 512 and small_tok.eot_id == 511
    data = json.loads(small_tok.to_json_str())
    assert data["model"]["type"] == "BPE" and data["pre_tokenizer"]["type"] == "ByteLevel"
    assert small_tok.encode("a language model reads tokens <|endoftext|>")[-1] == 511
    assert small_tok.encode("") == []


def test_small_tokenizer_stream_multibyte(small_tok):
    ids = small_tok.encode(MULTIBYTE)  # few merges: multibyte characters are split into bytes
    assert small_tok.decode(ids) == MULTIBYTE
    pieces, tail = stream(small_tok, ids)
    assert "".join(pieces) == MULTIBYTE and tail == ""
    assert pieces.count("") >= 10 and not any("\ufffd" in p for p in pieces)


def test_small_stream_equals_decode_on_random_ids(small_tok):
    """Its 256 single-byte tokens make random ids mostly invalid UTF-8: streaming must still equal decode."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        ids = rng.integers(0, small_tok.vocab_size, rng.integers(1, 12)).tolist()
        pieces, tail = stream(small_tok, ids)
        assert "".join(pieces) + tail == small_tok.decode(ids), ids


def test_byte_alphabet():
    table = byte_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord("A")] == "A" and table[ord(" ")] == "\u0120" and table[ord("\n")] == "\u010a"


def test_bad_ids(small_tok):
    with pytest.raises(TokenizerError, match="token id 512 is outside"):
        small_tok.decode([1, 512])
    with pytest.raises(TokenizerError, match="token id -1 is outside"):
        small_tok.stream_decoder().push(-1)
    with pytest.raises(TokenizerError, match="encode takes a str"):
        small_tok.encode(b"bytes")


def test_bad_files(tmp_path):
    with pytest.raises(TokenizerError, match="no tokenizer.json, and no vocab.json"):
        Tokenizer.from_dir(tmp_path)
    with pytest.raises(TokenizerError, match="tokenizer.json: file not found"):
        Tokenizer.from_file(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(TokenizerError, match="tokenizer.json: not a valid tokenizer.json"):
        Tokenizer.from_dir(tmp_path)


def test_tokenizer_without_eot():
    data = json.loads(make_tokenizer_json(300))
    data["added_tokens"] = []
    del data["model"]["vocab"]["<|endoftext|>"]
    with pytest.raises(TokenizerError, match=re.escape("no <|endoftext|> token")):
        Tokenizer.from_json_str(json.dumps(data))


def test_non_byte_level_is_refused():
    data = json.loads(make_tokenizer_json(300))
    data["decoder"] = {"type": "BPEDecoder", "suffix": "</w>"}
    with pytest.raises(TokenizerError, match="byte-level BPE.*BPEDecoder"):
        Tokenizer.from_json_str(json.dumps(data))


def test_encode_lets_other_threads_run(small_tok):
    """A long prompt's encoding does not stop the process's other Python threads (the server's event loop and
    engine): while a thread encodes, another keeps waking from short sleeps. Its ids are tokenizers' encode's."""
    import sys
    import threading
    import time

    rng = np.random.default_rng(0)
    text = " ".join("".join(rng.choice(list("abcdefghijklmnop"), 12)) for _ in range(8000))
    assert small_tok.encode(text) == small_tok._tok.encode(text, add_special_tokens=False).ids
    interval = sys.getswitchinterval()
    sys.setswitchinterval(2e-4)  # the server's
    try:
        worker = threading.Thread(target=lambda: [small_tok.encode(text) for _ in range(3)])
        wakes, t0 = 0, time.perf_counter()
        worker.start()
        while worker.is_alive():
            time.sleep(2e-4)
            wakes += 1
        wall = time.perf_counter() - t0
    finally:
        sys.setswitchinterval(interval)
    # holding the GIL, the encoding lets the sleeper wake about twice in all; released, hundreds of times
    assert wall > 0.02 and wakes >= 20, (wall, wakes)
