"""The position registry: PositionConfig and the valid method x augmentation combinations come
from the methods' own registrations."""

from __future__ import annotations

from posenc.errors import ConfigError


def test_position_config_has_one_typed_block_per_registered_method() -> None:
    """PositionConfig is generated from the registry: a new method file brings its own YAML block."""
    import dataclasses

    from posenc.positions import PositionConfig, registry

    fields = {f.name: f for f in dataclasses.fields(PositionConfig)}
    assert set(fields) == {"name"} | {e.name for e in registry.entries()}
    for e in registry.entries():
        assert fields[e.name].type is e.params and isinstance(getattr(PositionConfig(), e.name), e.params)
    assert PositionConfig.__module__ == "posenc.positions.config" and PositionConfig().name == "ape"


def test_augmentations_compose_only_with_the_methods_that_declare_them() -> None:
    from posenc.positions import registry, resolve

    for aug in registry.AUGMENT:
        for e in (*registry.INPUT.values(), *registry.ATTENTION.values()):
            name = f"{e.name}+{aug}" if e.name in registry.INPUT else f"none+{e.name}+{aug}"
            try:
                resolve(name)
                ok = True
            except ConfigError:
                ok = False
            assert ok == (aug in e.augmentable_by), name
