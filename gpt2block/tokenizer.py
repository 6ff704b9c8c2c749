"""GPT-2's byte-level BPE tokenizer, through the `tokenizers` library.

A Tokenizer is read from a checkpoint's ``tokenizer.json`` or built from its
``vocab.json`` + ``merges.txt``. Streaming decode (``stream_decoder``) emits
text only once it ends on a whole UTF-8 character: one byte-level token may
hold half of an emoji or a CJK character, and the rest comes with the next.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Iterable

EOT = "<|endoftext|>"


class TokenizerError(ValueError):
    """A tokenizer that cannot be read or used; the message names the file or the id."""


def _tokenizers():
    try:
        import tokenizers
    except ImportError as e:  # a declared dependency; say so plainly if it is missing
        raise TokenizerError(f"the 'tokenizers' package is needed to read a tokenizer ({e})") from None
    return tokenizers


class Tokenizer:
    """Text <-> token ids. ``eot_id`` is the id of <|endoftext|> (50256 for GPT-2)."""

    def __init__(self, tok, source: str):
        self._tok = tok  # tokenizers.Tokenizer
        self.source = source
        self.vocab_size: int = tok.get_vocab_size(with_added_tokens=True)
        eot = tok.token_to_id(EOT)
        if eot is None:
            raise TokenizerError(f"{source}: the tokenizer has no {EOT} token")
        self.eot_id: int = eot
        if not isinstance(tok.decoder, _tokenizers().decoders.ByteLevel):
            raise TokenizerError(
                f"{source}: gpt2block reads byte-level BPE tokenizers (GPT-2's); "
                f"this one's decoder is {type(tok.decoder).__name__}"
            )
        self._token_bytes: list[bytes] | None = None
        self._token_texts: list[str | None] | None = None

    # ---- construction

    @classmethod
    def from_json_str(cls, text: str, source: str = "tokenizer.json text") -> "Tokenizer":
        tk = _tokenizers()
        try:
            tok = tk.Tokenizer.from_str(text)
        except Exception as e:  # tokenizers raises a bare Exception for a malformed file
            raise TokenizerError(f"{source}: not a valid tokenizer.json ({e})") from None
        return cls(tok, source)

    @classmethod
    def from_file(cls, tokenizer_json: str | Path) -> "Tokenizer":
        path = Path(tokenizer_json)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TokenizerError(f"{path}: file not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise TokenizerError(f"{path}: cannot read ({e})") from None
        return cls.from_json_str(text, source=str(path))

    @classmethod
    def from_vocab_merges(cls, vocab_json: str | Path, merges_txt: str | Path) -> "Tokenizer":
        """GPT-2's byte-level BPE from OpenAI-style vocab.json + merges.txt."""
        tk = _tokenizers()
        vocab_json, merges_txt = Path(vocab_json), Path(merges_txt)
        for p in (vocab_json, merges_txt):
            if not p.is_file():
                raise TokenizerError(f"{p}: file not found")
        try:
            bpe = tk.models.BPE.from_file(str(vocab_json), str(merges_txt))
        except Exception as e:
            raise TokenizerError(f"{vocab_json} + {merges_txt}: not a valid BPE vocabulary ({e})") from None
        tok = tk.Tokenizer(bpe)
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tk.decoders.ByteLevel()
        if tok.token_to_id(EOT) is not None:
            tok.add_special_tokens([EOT])  # keeps its vocab id; marks it so the text "<|endoftext|>" maps to it
        return cls(tok, f"{vocab_json} + {merges_txt.name}")

    @classmethod
    def from_dir(cls, path: str | Path) -> "Tokenizer":
        """tokenizer.json in ``path``, else vocab.json + merges.txt."""
        path = Path(path)
        if (path / "tokenizer.json").is_file():
            return cls.from_file(path / "tokenizer.json")
        if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            return cls.from_vocab_merges(path / "vocab.json", path / "merges.txt")
        raise TokenizerError(f"{path}: no tokenizer.json, and no vocab.json + merges.txt")

    def to_json_str(self) -> str:
        """The tokenizer.json text (stored in packed files, so they are self-contained)."""
        return self._tok.to_str()

    # ---- use

    def encode(self, text: str) -> list[int]:
        """Text -> ids. The empty text gives [] (generation starts an empty prompt from eot).

        Through tokenizers' encode_batch, which lets other Python threads run while it works (its encode holds
        the GIL throughout: milliseconds for a long prompt, during which a server's other threads stop); the
        same ids."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode takes a str; got {type(text).__name__}")
        if not text:
            return []
        return self._tok.encode_batch([text], add_special_tokens=False)[0].ids

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text. Bytes that do not form whole UTF-8 characters come out as U+FFFD."""
        ids = self._check_ids(ids)
        return self._tok.decode(ids, skip_special_tokens=False)

    def stream_decoder(self) -> "StreamDecoder":
        return StreamDecoder(self)

    def token_bytes(self) -> list[bytes]:
        """id -> the bytes of that token (built once, on first use)."""
        if self._token_bytes is None:
            self._token_bytes = token_bytes_table(self._tok, self.source)
        return self._token_bytes

    def token_texts(self) -> list[str | None]:
        """id -> the text of that token's bytes when they are whole UTF-8 characters, else None (built once, on
        first use, with token_bytes)."""
        if self._token_texts is None:
            texts = []
            for b in self.token_bytes():
                try:
                    texts.append(b.decode("utf-8"))
                except UnicodeDecodeError:
                    texts.append(None)
            self._token_texts = texts
        return self._token_texts

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise TokenizerError(f"token id {i} is outside the tokenizer's vocabulary [0, {self.vocab_size})")
            out.append(i)
        return out

    def __repr__(self) -> str:
        return f"Tokenizer({self.source!r}, vocab_size={self.vocab_size}, eot_id={self.eot_id})"


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte 0..255 as one printable character.

    Bytes that are printable Latin-1 ('!'..'~', '\u00a1'..'\u00ac', '\u00ae'..'\u00ff')
    stand for themselves; the other 68, in order, become chr(256), chr(257), ...
    """
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def token_bytes_table(tok, source: str) -> list[bytes]:
    """id -> the bytes that token stands for (added tokens: their text in UTF-8)."""
    char_to_byte = {c: b for b, c in byte_to_unicode().items()}
    added = {i: t.content for i, t in tok.get_added_tokens_decoder().items()}
    n = tok.get_vocab_size(with_added_tokens=True)
    table = []
    for i in range(n):
        if i in added:
            table.append(added[i].encode("utf-8"))
            continue
        piece = tok.id_to_token(i)
        if piece is None or any(c not in char_to_byte for c in piece):
            raise TokenizerError(f"{source}: token id {i} ({piece!r}) is not a byte-level BPE token")
        table.append(bytes(char_to_byte[c] for c in piece))
    return table


class StreamDecoder:
    """Token-by-token decoding that never emits half a UTF-8 character.

    Each id becomes its bytes (the byte-level alphabet, undone); an incremental
    UTF-8 decoder holds back the bytes of a character that is not finished yet.
    The pieces pushed out, plus ``flush()``, join to ``decode(all ids)``.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self._table = tokenizer.token_bytes()
        self._texts = tokenizer.token_texts()
        self._vocab = tokenizer.vocab_size
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = False  # the UTF-8 decoder holds bytes of an unfinished character

    def push(self, token_id: int) -> str:
        """Add one id; return the text now complete ('' while a character is unfinished)."""
        i = int(token_id)
        if not 0 <= i < self._vocab:
            (i,) = self.tokenizer._check_ids([i])  # raises: outside the vocabulary
        if not self._pending:  # nothing held back: a token of whole characters is its own text
            text = self._texts[i]
            if text is not None:
                return text
        text = self._utf8.decode(self._table[i])
        self._pending = bool(self._utf8.getstate()[0])
        return text

    def flush(self) -> str:
        """Whatever is left: an unfinished character comes out as U+FFFD."""
        self._pending = False
        return self._utf8.decode(b"", final=True)
