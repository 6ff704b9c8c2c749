"""The flat block layout against REFERENCE.md's table."""

import numpy as np
import pytest

from gpt2block.layout import FIELD_NAMES, FIELDS, block_layout, block_numel

# REFERENCE.md, "The flat block layout", D = 768: name -> (offset, shape)
REFERENCE_768 = {
    "ln1_g": (0, (768,)),
    "ln1_b": (768, (768,)),
    "w_qkv": (1_536, (768, 2_304)),
    "b_qkv": (1_771_008, (2_304,)),
    "w_attn": (1_773_312, (768, 768)),
    "b_attn": (2_363_136, (768,)),
    "ln2_g": (2_363_904, (768,)),
    "ln2_b": (2_364_672, (768,)),
    "w_fc": (2_365_440, (768, 3_072)),
    "b_fc": (4_724_736, (3_072,)),
    "w_proj": (4_727_808, (3_072, 768)),
    "b_proj": (7_087_104, (768,)),
}


def test_d768_matches_reference_table():
    lay = block_layout(768)
    assert [s.name for s in lay.slots] == list(REFERENCE_768)
    for name, (offset, shape) in REFERENCE_768.items():
        assert lay.offset(name) == offset, name
        assert lay[name].shape == shape, name
    assert lay.numel == block_numel(768) == 7_087_872


def test_hf_names_in_reference_order():
    assert [f[1] for f in FIELDS] == [
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
        "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
        "mlp.c_proj.weight", "mlp.c_proj.bias",
    ]


@pytest.mark.parametrize("d", [64, 128, 768, 1024, 1280, 1600, 4096])
def test_total_is_12d2_plus_13d_and_slots_tile(d):
    lay = block_layout(d)
    assert lay.numel == block_numel(d) == 12 * d * d + 13 * d
    end = 0
    for s in lay.slots:  # contiguous, in order, no gaps or overlaps
        assert s.offset == end
        end = s.end
    assert end == lay.numel


def test_views_address_the_offsets():
    lay = block_layout(128)
    flat = np.arange(lay.numel, dtype=np.float32)
    views = lay.views(flat)
    assert list(views) == list(FIELD_NAMES)
    for s in lay.slots:
        v = views[s.name]
        assert v.shape == s.shape
        assert np.shares_memory(v, flat)
        assert v.reshape(-1)[0] == s.offset and v.reshape(-1)[-1] == s.end - 1
    views["w_fc"][3, 5] = -1.0  # row-major [in, out]
    assert flat[lay.offset("w_fc") + 3 * 512 + 5] == -1.0


@pytest.mark.parametrize("d", [0, -64, 100, 65])
def test_bad_width_is_refused(d):
    with pytest.raises(ValueError, match="multiple of 64"):
        block_layout(d)


def test_views_refuse_a_wrong_buffer():
    with pytest.raises(ValueError, match="7087872"):
        block_layout(768).views(np.zeros(7_087_871, np.float32))
    with pytest.raises(KeyError, match="w_nope"):
        block_layout(64)["w_nope"]
