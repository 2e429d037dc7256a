"""``memq eval``: the ranking metrics against hand-computed values, LoCoMo's mapping of
evidence turns to memory-file lines, and one real run of the CLI on a tiny BEIR collection
(indexed through the embedded broker and a real worker, with the tiny GGUF model)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from memq.evaluation import beir, locomo
from memq.evaluation.metrics import mean, mrr_at, ndcg_at, recall_at
from tests.conftest import run_memq

# ---------------------------------------------------------------------------------------------
# Metrics


def test_ndcg_with_graded_gains_by_hand() -> None:
    rel = {"b": 1, "c": 2, "d": 1}
    # DCG = (2^1-1)/log2(3) + (2^2-1)/log2(4); ideal order c, b, d.
    dcg = 1 / math.log2(3) + 3 / 2
    idcg = 3 / 1 + 1 / math.log2(3) + 1 / 2
    assert ndcg_at(["a", "b", "c"], rel) == pytest.approx(dcg / idcg)
    assert ndcg_at(["c", "b", "d"], rel) == pytest.approx(1.0)
    assert ndcg_at(["a", "x"], rel) == 0.0
    assert ndcg_at(["a"], {"a": 0}) == 0.0  # nothing relevant: no division by zero


def test_ndcg_cuts_at_k() -> None:
    ranked = [f"n{i}" for i in range(10)] + ["hit"]
    assert ndcg_at(ranked, {"hit": 1}) == 0.0
    assert ndcg_at(ranked, {"hit": 1}, k=11) == pytest.approx(1 / math.log2(12))


def test_recall_and_mrr_by_hand() -> None:
    rel = {"b": 1, "c": 2, "d": 1, "z": 0}  # grade 0 is not relevant
    assert recall_at(["a", "b", "c"], rel, 2) == pytest.approx(1 / 3)
    assert recall_at(["a", "b", "c", "z"], rel, 10) == pytest.approx(2 / 3)
    assert mrr_at(["a", "b", "c"], rel) == pytest.approx(1 / 2)
    assert mrr_at(["z", "a"], rel) == 0.0
    assert mrr_at(["a"] * 10 + ["b"], rel) == 0.0  # first hit beyond 10


def test_mean_of_rows() -> None:
    assert mean([{"x": 1.0, "y": 0.0}, {"x": 0.0, "y": 0.5}]) == {"x": 0.5, "y": 0.25}
    assert mean([]) == {}


# ---------------------------------------------------------------------------------------------
# BEIR files


def test_qrels_header_crlf_and_ranking_by_best_chunk(tmp_path: Path) -> None:
    qrels = tmp_path / "test.tsv"
    qrels.write_bytes(b"query-id\tcorpus-id\tscore\r\n1\tA\t2\r\n1\tB\t0\r\n2\tC\t1\r\n")
    assert beir.load_qrels(qrels) == {"1": {"A": 2, "B": 0}, "2": {"C": 1}}
    ids = {"memory/docs/A.md": "A", "memory/docs/B.md": "B"}
    hits = [{"path": p} for p in ("memory/docs/B.md", "memory/docs/A.md", "memory/docs/B.md")]
    assert beir.rank_documents(hits, ids) == ["B", "A"]


def test_missing_collection_parts_are_named(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text("{}\n")
    with pytest.raises(beir.CollectionError, match=r"queries\.jsonl is missing"):
        beir.load_collection(tmp_path, "test")


# ---------------------------------------------------------------------------------------------
# LoCoMo


SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                      {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!\nWhat name?",
                       "blip_caption": "a photo of a cat"}],
        "session_2_date_time": "9:00 am on 8 May, 2023",
        "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "Back again."}],
        "session_3_date_time": "10:15 am on 1 June, 2023",
        "session_3": [{"speaker": "Ann", "dia_id": "D3:1", "text": "The cat is Miso."}],
        "session_4_date_time": "10:15 am on 2 June, 2023",
        "session_4": [],
    },
    "qa": [{"question": "What is the cat called?", "answer": "Miso", "category": 4,
            "evidence": ["D3:1; D1:1"]},
           {"question": "Unanswerable?", "category": 5, "evidence": ["D"]}],
    "observation": {
        "session_3_observation": {"Ann": [["Ann's cat is called  Miso.", "D3:1"]]},
        "session_1_observation": {"Ann": [["Ann adopted a cat.", "D1:1"],
                                          ["Ann likes no-one.", "D"]],
                                  "Bob": [["Bob saw a photo of Ann's cat.", "D1:2", "D1:1"]]},
    },
}


def test_locomo_sessions_become_dated_notes_with_turn_lines() -> None:
    conv = locomo.conversation(SAMPLE)
    assert sorted(conv.files) == ["memory/2023-05-08.md", "memory/2023-06-01.md"]
    may = conv.files["memory/2023-05-08.md"].split("\n")
    assert may[0] == "# Session 1: 1:56 pm on 8 May, 2023"
    for turn, needle in (("D1:1", "Ann: I adopted a cat."),
                         ("D1:2", "Bob: Nice! What name? [shares a photo: a photo of a cat]"),
                         ("D2:1", "Bob: Back again.")):
        path, line = conv.lines[turn]
        assert path == "memory/2023-05-08.md"
        assert may[line - 1] == f"- [{turn}] {needle}"
    assert "# Session 2: 9:00 am on 8 May, 2023" in may  # same day: same file
    assert conv.lines["D3:1"] == ("memory/2023-06-01.md", 3)
    # Packed evidence ids are split; a question without a usable id is left out.
    assert [(q.text, q.evidence) for q in conv.questions] == [
        ("What is the cat called?", ["D3:1", "D1:1"])]


def test_evidence_found_only_inside_a_hit_line_range() -> None:
    conv = locomo.conversation(SAMPLE)
    hits = [{"path": "memory/2023-05-08.md", "startLine": 1, "endLine": 3},
            {"path": "memory/2023-06-01.md", "startLine": 4, "endLine": 9}]
    found = locomo.turns_found(hits, conv)
    assert found == {"D1:1"}  # line 3 of May; June's D3:1 is on line 3, outside 4-9
    assert locomo.recall(found, ["D3:1", "D1:1"]) == (pytest.approx(0.5), pytest.approx(0.5))
    assert locomo.recall(locomo.turns_found(hits[:0], conv), ["D3:1", "D1:1"]) == (0.0, 0.0)
    assert locomo.recall(found, ["D9:9"]) == (0.0, 0.0)  # an id missing from the conversation
    assert locomo.evidence_ids(["D8:6; D9:17", "D", "D:11:26", "D8:6"]) == ["D8:6", "D9:17"]


def test_session_level_recall_counts_a_session_held_by_another_of_its_turns() -> None:
    conv = locomo.conversation(SAMPLE)
    hits = [{"path": "memory/2023-05-08.md", "startLine": 4, "endLine": 4}]  # D1:2 only
    assert locomo.recall(locomo.turns_found(hits, conv), ["D1:1"]) == (0.0, 1.0)


def test_the_memory_layout_adds_cited_facts_as_memory_entries() -> None:
    notes, memory = locomo.conversation(SAMPLE), locomo.conversation(SAMPLE, "memory")
    assert {p: t for p, t in memory.files.items() if p != "MEMORY.md"} == notes.files
    # One entry per fact, session by session; ids stay out of the text; uncited facts go.
    assert memory.files["MEMORY.md"] == ("- Ann adopted a cat.\n- Bob saw a photo of Ann's cat.\n"
                                         "- Ann's cat is called Miso.\n")
    entry = [{"path": "MEMORY.md", "startLine": 2, "endLine": 2}]
    assert locomo.turns_found(entry, memory) == {"D1:2", "D1:1"}
    assert locomo.turns_found(entry, notes) == set()
    with pytest.raises(ValueError, match="unknown LoCoMo layout 'wiki'"):
        locomo.conversation(SAMPLE, "wiki")


# ---------------------------------------------------------------------------------------------
# The CLI, for real


DOCS = [("d1", "Zebra stripes", "Why zebras have black and white stripes: biting flies."),
        ("d2", "Kettle descaling", "Vinegar removes limescale from a kettle."),
        ("d3", "Router setup", "The VLAN for the home network uses tag 20."),
        ("d4", "Sourdough", "A starter needs flour, water and patience.")]


def tiny_collection(root: Path) -> Path:
    folder = root / "tiny"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in DOCS))
    (folder / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "zebra stripes"}) + "\n"
        + json.dumps({"_id": "q2", "text": "limescale in the kettle"}) + "\n"
        + json.dumps({"_id": "q3", "text": "not judged"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n"
                                               "q2\td2\t1\n")
    return folder


def test_memq_eval_on_a_tiny_beir_collection(tmp_path: Path, tiny_model) -> None:
    folder = tiny_collection(tmp_path)
    cfg = tmp_path / "eval.json"
    cfg.write_text(json.dumps({"provider": "local",
                               "local": {"modelPath": str(tiny_model), "threads": 1}}))
    env = {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_BROKER_URL": "", "REDIS_URL": ""}
    work = tmp_path / "work"
    done = run_memq("eval", "--collection", str(folder), "--work-dir", str(work), "--config",
                    str(cfg), "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kind"] == "beir" and out["queries"] == 2 and out["chunks"] == 4
    figures = out["figures"]
    assert list(figures) == ["keyword", "vector", "hybrid", "rrf", "hybrid+mmr", "hybrid+decay",
                             "defaults", "superseded"]
    # Each query's words occur in its relevant document only: keyword search is perfect.
    assert figures["keyword"] == {"nDCG@10": 1.0, "R@10": 1.0, "R@100": 1.0, "MRR@10": 1.0}
    for mode in ("vector", "hybrid", "rrf", "hybrid+mmr", "defaults"):  # 4 documents: all ranked
        assert figures[mode]["R@10"] == 1.0 and 0.0 < figures[mode]["nDCG@10"] <= 1.0
    # Undated documents are evergreen: decay changes nothing, and memq's defaults are the
    # weighted fusion with MMR.
    assert figures["hybrid+decay"] == figures["hybrid"]
    assert figures["defaults"] == figures["hybrid+mmr"]
    assert figures["superseded"] == figures["defaults"]  # nothing dated: nothing superseded
    # Indexed by the real pipeline: one Markdown file per document, every chunk has a vector.
    assert sorted(p.name for p in (work / "workspace" / "memory" / "docs").iterdir()) == [
        "d1.md", "d2.md", "d3.md", "d4.md"]
    with sqlite3.connect(work / "memq.sqlite") as conn:
        states = conn.execute("SELECT state, count(*) FROM chunks GROUP BY state").fetchall()
    assert states == [("ready", 4)]

    human = run_memq("eval", "--collection", str(folder), "--work-dir", str(work), "--config",
                     str(cfg), "--limit", "1", "--modes", "keyword", env=env, timeout=300)
    assert human.returncode == 0, human.stderr
    assert "tiny test: 1 queries" in human.stdout
    assert "| keyword (FTS5 BM25) | 1.0000 | 1.0000 | 1.0000 | 1.0000 |" in human.stdout


def test_memq_eval_refuses_a_missing_collection(tmp_path: Path) -> None:
    done = run_memq("eval", "--collection", str(tmp_path / "nope"), "--work-dir",
                    str(tmp_path / "w"))
    assert done.returncode == 2
    assert "does not exist" in done.stderr


def tiny_locomo(tmp_path: Path, model: Path) -> tuple[Path, Path, dict[str, str]]:
    """A one-question LoCoMo file, a config of the tiny model, and the CLI's environment."""
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([{**SAMPLE, "qa": SAMPLE["qa"][:1]}]))
    cfg = tmp_path / "eval.json"
    cfg.write_text(json.dumps({"provider": "local",
                               "local": {"modelPath": str(model), "threads": 1}}))
    return data, cfg, {"MEMQ_HOME": str(tmp_path / "home"), "MEMQ_BROKER_URL": "",
                       "REDIS_URL": ""}


def test_memq_eval_on_a_tiny_locomo_file_scores_both_layouts(tmp_path: Path, tiny_model) -> None:
    data, cfg, env = tiny_locomo(tmp_path, tiny_model)
    done = run_memq("eval", "--collection", str(data), "--work-dir", str(tmp_path / "work"),
                    "--config", str(cfg), "--modes", "keyword", "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kind"] == "locomo" and list(out["figures"]) == ["notes", "memory"]
    notes, memory = (out["figures"][layout]["keyword"]["all"] for layout in ("notes", "memory"))
    assert notes["questions"] == memory["questions"] == 1
    # Every chunk fits in six results: both evidence turns and sessions are found either way.
    assert notes["R@6"] == memory["R@6"] == notes["S@6"] == memory["S@6"] == 1.0
    # The one entry that says "called" is the best keyword match, and it cites D3:1.
    assert memory["R@1"] == 0.5 and memory["S@1"] == 0.5
    assert (tmp_path / "work" / "memory" / "conv-x" / "workspace" / "MEMORY.md").is_file()
    assert not (tmp_path / "work" / "notes" / "conv-x" / "workspace" / "MEMORY.md").exists()
    assert "Layout `memory`: session-level S@k" in out["table"]
    one = run_memq("eval", "--collection", str(data), "--work-dir", str(tmp_path / "work"),
                   "--config", str(cfg), "--modes", "keyword", "--layout", "memory", "--json",
                   env=env, timeout=300)
    assert one.returncode == 0, one.stderr
    assert list(json.loads(one.stdout)["figures"]) == ["memory"]
    recency = run_memq("eval", "--collection", str(data), "--work-dir", str(tmp_path / "work"),
                       "--config", str(cfg), "--modes", "defaults,superseded", "--layout",
                       "notes", "--json", env=env, timeout=300)
    assert recency.returncode == 0, recency.stderr
    figures = json.loads(recency.stdout)["figures"]["notes"]
    assert list(figures) == ["defaults", "superseded"]
    assert figures["superseded"]["all"]["questions"] == 1


def test_memq_eval_applies_the_fused_keys_to_locomo(tmp_path: Path, tiny_model) -> None:
    """``--vector-weight`` and ``--rrf-k`` reach LoCoMo's fused modes (they were once read for
    BEIR folders only and silently dropped here)."""
    data, cfg, env = tiny_locomo(tmp_path, tiny_model)
    done = run_memq("eval", "--collection", str(data), "--work-dir", str(tmp_path / "work"),
                    "--config", str(cfg), "--modes", "keyword,hybrid,rrf", "--layout", "notes",
                    "--vector-weight", "0.25", "--rrf-k", "7", "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fused"] == {"vectorWeight": 0.25, "textWeight": 0.75,
                                                "rrfK": 7}
    folder = tmp_path / "work" / "notes" / "conv-x"
    for mode in ("hybrid", "rrf"):  # the keys each mode was searched with
        hybrid = json.loads((folder / f"memq-{mode}.json").read_text())["query"]["hybrid"]
        assert (hybrid["vectorWeight"], hybrid["textWeight"], hybrid["rrfK"]) == (0.25, 0.75, 7)
    keyword = json.loads((folder / "memq-keyword.json").read_text())
    assert "vectorWeight" not in json.dumps(keyword)  # not a fused mode


@pytest.mark.parametrize(("kind", "flags", "named"), [
    ("locomo", ["--split", "dev"], "--split"),
    ("beir", ["--layout", "notes"], "--layout"),
    ("changed", ["--modes", "hybrid"], "--modes"),
    ("changed", ["--vector-weight", "0.5"], "--vector-weight"),
])
def test_memq_eval_refuses_an_option_the_collection_has_no_use_for(
        tmp_path: Path, kind: str, flags: list[str], named: str) -> None:
    if kind == "locomo":
        collection = tmp_path / "tiny-locomo.json"
        collection.write_text(json.dumps([SAMPLE]))
    elif kind == "beir":
        collection = tiny_collection(tmp_path)
    else:
        collection = Path(__file__).parent / "data" / "changed_facts.json"
    work = tmp_path / "work"
    done = run_memq("eval", "--collection", str(collection), "--work-dir", str(work), *flags,
                    env={"MEMQ_HOME": str(tmp_path / "home")})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not used with a" in done.stderr and named in done.stderr
    assert not work.exists()  # refused before anything was indexed
