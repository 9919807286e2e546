"""The command line's --ray / --per-node options, and a clear error without Ray."""

import sys

import pytest

from loadgen.cli.main import build_parser, main
from loadgen.cli.spread import spread_engine
from loadgen.engine.workers.ray_actors import RayEngine, import_ray
from loadgen.errors import SettingsError


def test_run_find_peak_and_sweep_take_ray_and_per_node():
    parser = build_parser()
    for command in (["run", "f.toml"], ["find-peak", "f.toml"],
                    ["sweep", "f.toml", "--grid", "target_qps=1"]):
        args = parser.parse_args([*command, "--sut", "null", "--out", "d", "--ray", "h:6379",
                                  "--per-node", "2", "--workers", "4"])
        assert (args.ray, args.per_node, args.workers) == ("h:6379", 2, 4)
        with spread_engine(args) as engine:
            assert isinstance(engine, RayEngine) and engine.address == "h:6379"
            assert engine.per_node == 2


def test_per_node_needs_ray_and_one_at_least(capsys):
    assert main(["run", "scenarios/server.toml", "--sut", "null", "--per-node", "2",
                 "--set", "preset='dev'"]) == 2
    assert "--per-node: only with --ray" in capsys.readouterr().err
    with pytest.raises(SettingsError, match="at least 1"):
        RayEngine("local", per_node=0)


def test_without_ray_installed_the_error_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(SettingsError, match=r"pip install 'loadgen\[ray\]'"):
        import_ray()


A, B, HEAD, GONE = ("a" * 56, "b" * 56, "c" * 56, "d" * 56)  # node ids: 28 bytes in hex


class _Nodes:
    """A stand-in for the `ray` module's node table: three alive nodes, one CPU-less."""

    @staticmethod
    def nodes():
        return [{"NodeID": HEAD, "Alive": True, "Resources": {}},
                {"NodeID": A, "Alive": True, "Resources": {"CPU": 4.0}},
                {"NodeID": GONE, "Alive": False, "Resources": {"CPU": 4.0}},
                {"NodeID": B, "Alive": True, "Resources": {"CPU": 2.0}}]


def test_per_node_packs_k_workers_to_each_node_with_a_cpu():
    pytest.importorskip("ray")
    placed = RayEngine("auto", per_node=2)._placements(_Nodes, 4)
    assert [p.node_id for p in placed] == [A, A, B, B]
    assert not any(p.soft for p in placed)
    assert RayEngine("auto")._placements(_Nodes, 3) == ["SPREAD"] * 3
    with pytest.raises(SettingsError, match="5 workers need 3 nodes with a free CPU, the "
                                            "cluster has 2"):
        RayEngine("auto", per_node=2)._placements(_Nodes, 5)
