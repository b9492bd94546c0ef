import dataclasses

import pytest
from trl import RLOOConfig

from rloo_kit import ConfigError, ModelTooLargeError, estimate_memory, get_preset, list_presets, make_config
from rloo_kit.hardware import Hardware
from rloo_kit.memory import ModelShape, parse_params
from rloo_kit.presets import RLOO_FIELDS, pick_preset, resolve_preset

CPU = Hardware("cpu", "test cpu", 24.0, 20.0, False, 2)


def gpu(gib: float, bf16: bool = True) -> Hardware:
    return Hardware("cuda", f"{gib} GiB GPU", gib, gib, bf16, 8)


def test_every_preset_field_exists_in_installed_rloo_config():
    """A TRL upgrade that renames a field must fail here, not in a user's notebook."""
    fields = {f.name: f for f in dataclasses.fields(RLOOConfig)}
    for preset in list_presets():
        for name, value in preset.rloo_fields().items():
            assert name in fields, f"{preset.name}: RLOOConfig has no field {name}"
            assert isinstance(value, (int, float, str, bool))
    assert set(RLOO_FIELDS) <= set(fields)


@pytest.mark.parametrize("name", ["cpu", "8gb", "t4-16gb", "24gb", "40gb", "80gb"])
def test_each_preset_builds_a_config(name, tmp_path):
    cfg = make_config(name, output_dir=str(tmp_path), hardware=CPU)
    p = get_preset(name)
    assert isinstance(cfg, RLOOConfig)
    assert cfg.num_generations == p.num_generations and cfg.learning_rate == p.learning_rate
    assert cfg.use_cpu and not cfg.bf16 and "8bit" not in cfg.optim  # CPU flags applied


def test_gpu_flags_follow_bf16_support(tmp_path):
    # build the dict the config would get, without asking RLOOConfig to find a GPU here
    from rloo_kit.presets import device_flags

    assert device_flags(gpu(16, bf16=False), get_preset("t4-16gb")) == {"bf16": False, "fp16": True}
    assert device_flags(gpu(24), get_preset("24gb")) == {"bf16": True, "fp16": False}


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ConfigError) as e:
        get_preset("16gb")
    for name in ("cpu", "8gb", "t4-16gb", "24gb", "40gb", "80gb"):
        assert name in str(e.value)


def test_misspelt_field_names_the_real_one(tmp_path):
    with pytest.raises(ConfigError, match="num_generations"):
        make_config("cpu", output_dir=str(tmp_path), hardware=CPU, num_generation=4)


def test_group_size_below_two_is_refused(tmp_path):
    """The kit's range for K (rloo_kit.limits) refuses it before TRL, whose check a K of 0 never reached (its
    modulo divided by zero first); the reason is said with the number."""
    for k in (1, 0):
        with pytest.raises(ConfigError, match=rf"num_generations {k}: give a whole number >= 2 .*mean of the other"):
            make_config("cpu", output_dir=str(tmp_path), hardware=CPU, num_generations=k,
                        per_device_train_batch_size=4)


def test_batch_not_divisible_by_group_size_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not divisible by num_generations=4") as e:
        make_config("cpu", output_dir=str(tmp_path), hardware=CPU, per_device_train_batch_size=6)
    assert "per_device_train_batch_size 6 x 1 process(es)" in str(e.value)
    assert "per_device_train_batch_size=4" in str(e.value)  # the advice: the nearest multiple
    assert "TRL:" in str(e.value)


def test_an_open_preset_is_the_hardwares_everywhere():
    """One rule for preset=None / "auto" (load_model, attach_lora, build_trainer): the hardware's pick."""
    assert resolve_preset(None, CPU).name == resolve_preset("auto", CPU).name == "cpu"
    assert resolve_preset(None, gpu(23.6)).name == "24gb"
    assert resolve_preset("8gb", gpu(79.0)).name == "8gb"


def test_completion_longer_than_sequence_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="max_seq_length"):
        make_config("cpu", output_dir=str(tmp_path), hardware=CPU, max_completion_length=256)


@pytest.mark.parametrize("vram,expected", [(8.0, "8gb"), (15.6, "t4-16gb"), (23.6, "24gb"), (39.5, "40gb"),
                                           (79.3, "80gb"), (139.0, "80gb")])
def test_pick_preset_by_vram(vram, expected):
    assert pick_preset(gpu(vram)).name == expected


def test_pick_preset_on_cpu_is_cpu():
    assert pick_preset(CPU).name == "cpu"
    assert pick_preset(CPU, "135M").name == "cpu"


def test_pick_preset_steps_down_until_the_model_fits():
    big = pick_preset(gpu(23.6), "1.5B")
    assert big.name == "24gb"
    # a 32B model does not fit the 40gb preset's batch on a 40 GiB card, but a smaller preset's batch fits
    assert estimate_memory("32B", get_preset("40gb")).total_gb > 39.5 * 0.92
    chosen = pick_preset(gpu(39.5), "32B")
    assert chosen.memory_gb < 38 and estimate_memory("32B", chosen).total_gb <= 39.5 * 0.92


def test_model_too_large_for_the_gpu():
    with pytest.raises(ModelTooLargeError, match="GiB"):
        pick_preset(gpu(8.0), "70B")


def test_estimate_grows_with_model_and_batch():
    p = get_preset
    small, large = estimate_memory("0.5B", p("24gb")), estimate_memory("7B", p("24gb"))
    assert large.weights_gb > 5 * small.weights_gb
    assert estimate_memory("1.5B", p("80gb")).activations_gb > estimate_memory("1.5B", p("8gb")).activations_gb
    assert estimate_memory("1.5B", p("cpu")).weights_gb == pytest.approx(1.5e9 * 4 / 1024**3)
    with pytest.raises(ConfigError, match="get_preset"):
        estimate_memory("1.5B", "cpu")


def test_the_bf16_cpu_path_halves_activations_and_keeps_four_bytes_a_weight():
    fp32, bf16 = (estimate_memory("1.5B", get_preset("cpu"), cpu_bf16=b) for b in (False, True))
    assert bf16.weights_gb == fp32.weights_gb  # bf16 weights plus the sampler's packed bf16 copy
    assert bf16.activations_gb < 0.6 * fp32.activations_gb  # bf16 values; the fp32 log-prob tile stays
    four_bit = dataclasses.replace(get_preset("cpu"), load_in_4bit=True)  # 4-bit on a CPU is not the bf16 path
    assert estimate_memory("1.5B", four_bit, cpu_bf16=True) == estimate_memory("1.5B", four_bit)


def test_parse_params():
    assert parse_params("135M") == 135e6 and parse_params("1.5B") == 1.5e9 and parse_params(7e9) == 7e9
    with pytest.raises(ConfigError):
        parse_params("big")


def test_shape_from_params_is_close_to_a_real_model():
    shape = ModelShape.from_params(1.5e9)
    assert 1000 < shape.hidden < 2200 and shape.layers == 28


def test_a_model_under_the_small_size_trains_at_the_larger_rate():
    """A GPU preset's 5e-5 (for 0.5B-8B models) barely moved SmolLM2-135M on CUDA; a model that small gets 4e-4,
    a larger one the preset's rate, and no rate is lowered."""
    from rloo_kit.presets import SMALL_MODEL_LEARNING_RATE, learning_rate_for

    small, large = ModelShape.from_params(135e6).params, ModelShape.from_params(1.5e9).params
    assert learning_rate_for(get_preset("8gb"), small) == SMALL_MODEL_LEARNING_RATE == 4e-4
    assert learning_rate_for(get_preset("80gb"), small) == 4e-4
    assert learning_rate_for(get_preset("8gb"), large) == get_preset("8gb").learning_rate == 5e-5
    faster = dataclasses.replace(get_preset("cpu"), learning_rate=1e-3)
    assert learning_rate_for(faster, small) == 1e-3


def test_a_small_model_is_not_quantized_where_its_preset_quantizes():
    from rloo_kit.presets import SMALL_MODEL_PARAMS, load_in_4bit_for

    assert load_in_4bit_for(get_preset("8gb"), 0.135e9) is False
    assert load_in_4bit_for(get_preset("80gb"), SMALL_MODEL_PARAMS) is True
    assert load_in_4bit_for(get_preset("8gb"), 1.5e9) is True
    assert load_in_4bit_for(get_preset("cpu"), 1.5e9) is False  # the preset's own: no 4-bit on a CPU
    asked = dataclasses.replace(get_preset("cpu"), load_in_4bit=True)
    assert load_in_4bit_for(asked, 0.135e9) is True  # changed from the preset's own: asked for


def test_the_memory_estimate_counts_a_small_model_as_the_kit_loads_it():
    """The 8gb preset's NF4 would count SmolLM2-135M's linear layers at a quarter of the bf16 they train in."""
    from rloo_kit.presets import estimate_as_loaded

    small, large = ModelShape.from_params(135e6), ModelShape.from_params(1.5e9)
    nf4 = dataclasses.replace(get_preset("8gb"), load_in_4bit=True)
    bf16 = dataclasses.replace(get_preset("8gb"), load_in_4bit=False)
    assert estimate_as_loaded(small, get_preset("8gb")) == estimate_memory(small, bf16)
    assert estimate_as_loaded(small, get_preset("8gb")).weights_gb > 1.5 * estimate_memory(small, nf4).weights_gb
    assert estimate_as_loaded(large, get_preset("8gb")) == estimate_memory(large, nf4)


def test_a_config_pins_the_training_defaults_unsloth_changes(monkeypatch, tmp_path):
    # Unsloth's patched RLOOConfig starts from a 10% warm-up, weight decay 0.001 and accumulation 2 (seen on an H100):
    # a run left to those would train differently on a GPU than on a CPU
    import trl

    @dataclasses.dataclass
    class UnslothLikeConfig(RLOOConfig):
        warmup_steps: float = 0.1
        weight_decay: float = 0.001
        gradient_accumulation_steps: int = 2

    monkeypatch.setattr(trl, "RLOOConfig", UnslothLikeConfig)
    cfg = make_config("cpu", output_dir=str(tmp_path), hardware=CPU)
    assert isinstance(cfg, UnslothLikeConfig)
    assert (cfg.warmup_steps, cfg.weight_decay) == (0, 0.0)
    assert cfg.gradient_accumulation_steps == get_preset("cpu").gradient_accumulation_steps
    assert make_config("cpu", output_dir=str(tmp_path), hardware=CPU, warmup_steps=2).warmup_steps == 2
