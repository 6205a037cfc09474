"""Hub ids the Hugging Face way (models/hub.py): the HF cache first; online, an uncached id downloads at its `revision`;
offline (HF_HUB_OFFLINE=1) or with no network, one line naming `pettingllms models pull` and the variable, in seconds.

This machine cannot reach the hub: the cache is a fake one in tmp (a tiny model in HF's cache layout), the hub a
local HTTP server answering as the hub does, or a closed port; the download itself is replaced by a copy.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub.constants
import pytest

from pettingllms_cli.errors import UserError
from pettingllms_cli.models import hub
from pettingllms_cli.models.loader import load_model, pull, resolve
from pettingllms_cli.spec import ModelSpec
from tests.conftest import EXPERIMENTS, FAST, run_cli

SMOKE = EXPERIMENTS / "smoke.yaml"
MAIN, V1 = "a" * 40, "b" * 40  # commits of the fake repo's default branch and of its tag v1
FAST_S = 10  # how long a refusal may take


def cache_model(cache: Path, repo: str, commit: str, ref: str | None) -> Path:
    """The tiny random model as a snapshot of `repo` in an HF cache at `cache`, the ref `ref` pointing at it."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    if not snapshot.exists():
        shutil.copytree(pull("tiny-llama"), snapshot)
    if ref is not None:
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty HF cache; no request reaches a hub unless a test puts one in place."""
    folder = tmp_path / "hf-cache"
    folder.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(folder))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    return folder


def closed_port() -> int:
    """A local port nothing listens on: a connection is refused at once, as with no network."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_hub(monkeypatch):
    """A local server that answers every model-info request as the hub does for a missing revision or repo."""

    class Hub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = "RevisionNotFound" if "/revision/" in self.path else "RepoNotFound"
            self.send_response(404)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield
    server.shutdown()
    server.server_close()


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def validate(monkeypatch, *sets: str) -> int:
    return run_cli(["validate", str(SMOKE), *[a for s in sets for a in ("--set", s)]], monkeypatch)


def test_a_cached_hub_id_loads_from_the_cache_without_asking_the_hub(cache, monkeypatch, capsys):
    snapshot = cache_model(cache, "org/tiny", MAIN, "main")
    for offline in ("0", "1"):  # online too: the cache comes first (the hub is a closed port here)
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
        assert resolve("org/tiny") == snapshot
        assert validate(monkeypatch, "models.tiny.source=org/tiny") == 0, capsys.readouterr().err
    model, tokenizer = load_model(ModelSpec(source="org/tiny", dtype="float32"))
    assert model.config.num_hidden_layers == 2 and tokenizer.chat_template is not None


def test_a_revision_picks_its_own_snapshot(cache, monkeypatch):
    main = cache_model(cache, "org/tiny", MAIN, "main")
    tagged = cache_model(cache, "org/tiny", V1, "v1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve("org/tiny") == main
    assert resolve("org/tiny", "v1") == tagged and resolve("org/tiny", V1) == tagged  # a tag, or the commit itself


def test_online_an_uncached_id_downloads_at_its_revision(cache, monkeypatch, capsys):
    asked, fetched = [], []

    def model_info(self, repo_id, revision=None, timeout=None, **kwargs):
        asked.append((repo_id, revision, timeout))
        files = ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "onnx/model.onnx", "README.md"]
        return SimpleNamespace(sha=V1, siblings=[SimpleNamespace(rfilename=f) for f in files])

    real = hub.snapshot_download

    def snapshot_download(repo_id, revision=None, local_files_only=False, allow_patterns=None, **kwargs):
        if local_files_only:
            return real(repo_id, revision=revision, local_files_only=True, **kwargs)
        fetched.append((repo_id, revision, allow_patterns))
        return str(cache_model(cache, repo_id, V1, revision))  # the "download": the files and the ref land in the cache

    monkeypatch.setattr(hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(hub, "snapshot_download", snapshot_download)
    assert validate(monkeypatch, "models.tiny.source=org/tiny", "models.tiny.revision=v1") == 0
    assert asked == [("org/tiny", "v1", hub.HUB_TIMEOUT_S)] and fetched == []  # validate asks, in one bounded request
    assert run_cli(["models", "pull", "org/tiny", "--revision", "v1"], monkeypatch) == 0
    assert str(cache / "models--org--tiny" / "snapshots" / V1) in capsys.readouterr().out
    assert fetched == [("org/tiny", "v1", ["config.json", "tokenizer.json", "model.safetensors"])]  # its model files only
    assert resolve("org/tiny", "v1") == cache / "models--org--tiny" / "snapshots" / V1 and len(asked) == 2  # now cached
    assert run_cli(["models", "pull", "org/tiny", "--revision", "v1"], monkeypatch) == 0
    assert len(asked) == 3  # `models pull` asks the hub again (a branch may have moved); loading does not
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve("org/tiny", "v1") == cache / "models--org--tiny" / "snapshots" / V1  # offline, from the cache


def test_offline_an_uncached_id_fails_at_once_naming_the_fix(cache, monkeypatch, capsys):
    monkeypatch.setattr(hub.HfApi, "model_info", lambda *a, **k: pytest.fail("HF_HUB_OFFLINE=1, yet the hub was asked"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    began = time.monotonic()
    assert validate(monkeypatch, "models.tiny.source=org/missing") == 2
    err = one_line(capsys)
    assert time.monotonic() - began < FAST_S
    assert "not in the local Hugging Face cache" in err and "HF_HUB_OFFLINE=1" in err
    assert "`pettingllms models pull org/missing`" in err


def test_with_no_network_an_uncached_id_fails_within_seconds(cache, monkeypatch, capsys):
    began = time.monotonic()
    assert validate(monkeypatch, "models.tiny.source=org/missing") == 2  # the hub is a closed port
    err = one_line(capsys)
    assert time.monotonic() - began < FAST_S
    assert "the hub cannot be reached (ConnectError" in err
    assert "`pettingllms models pull org/missing`" in err and "HF_HUB_OFFLINE" in err


def test_a_revision_that_does_not_exist_is_one_line_exit_2(cache, fake_hub, monkeypatch, capsys):
    assert validate(monkeypatch, "models.tiny.source=org/tiny", "models.tiny.revision=nope") == 2
    assert "hub model 'org/tiny' has no revision 'nope'" in one_line(capsys)
    assert validate(monkeypatch, "models.tiny.source=nobody/nothing") == 2
    assert "'nobody/nothing' does not exist, or is private or gated" in one_line(capsys)


def test_a_revision_is_for_hub_ids_only(cache, monkeypatch, capsys):
    assert validate(monkeypatch, "models.tiny.revision=v1") == 2  # the smoke spec's source is the built-in tiny-llama
    assert "only a hub id takes a revision" in one_line(capsys)
    assert run_cli(["models", "pull", "tiny-llama", "--revision", "v1"], monkeypatch) == 2
    assert "a revision is for hub ids" in one_line(capsys)


def test_built_in_aliases_never_ask_the_hub(cache, monkeypatch):
    monkeypatch.setattr(hub.HfApi, "model_info", lambda *a, **k: pytest.fail("a built-in alias asked the hub"))
    monkeypatch.setattr(hub, "snapshot_download", lambda *a, **k: pytest.fail("a built-in alias looked in the HF cache"))
    assert (resolve("tiny-llama") / "config.json").is_file()
    with pytest.raises(UserError, match="only a hub id takes a revision"):
        resolve("tiny-llama", "main")


def test_a_run_on_a_hub_revision_trains_offline_and_exports_it(cache, tmp_path, monkeypatch, capsys):
    cache_model(cache, "org/tiny", MAIN, "main")
    tagged = cache_model(cache, "org/tiny", V1, "v1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sets = [a for s in [*FAST, "models.tiny.source=org/tiny", "models.tiny.revision=v1"] for a in ("--set", s)]
    assert run_cli(["train", str(SMOKE), "--out", str(tmp_path / "run"), "--max-steps", "1", *sets], monkeypatch) == 0
    assert run_cli(["export", str(tmp_path / "run"), "--out", str(tmp_path / "export")], monkeypatch) == 0, capsys.readouterr()
    adapter = json.loads((tmp_path / "export" / "caller" / "adapter_config.json").read_text())
    base = json.loads((tmp_path / "export" / "caller" / "base.json").read_text())
    assert (adapter["base_model_name_or_path"], adapter["revision"]) == ("org/tiny", "v1")  # what AutoPeftModel loads
    assert base["local_path"] == str(tagged.resolve()) and base["revision"] == "v1"
    spec = tmp_path / "run" / "spec.yaml"
    spec.write_text(spec.read_text().replace("revision: v1", "revision: main"))  # another base under the adapters
    capsys.readouterr()
    assert run_cli(["play", str(tmp_path / "run"), "--question", "1+1?"], monkeypatch) == 2
    assert "models.tiny.revision: 'v1' -> 'main'" in one_line(capsys)
