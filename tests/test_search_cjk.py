"""Chinese, Japanese and Korean keyword search, mixed-script queries, and the schema upgrade
that re-indexes an older store's full-text table."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.query import memory_search
from pipeline.search.fts import build_match_query
from pipeline.store import schema
from pipeline.store.engine import connect
from pipeline.store.tokens import index_text, query_text, words
from tests.searchkit import build

NOTES = {
    "memory/zh-meeting.md": "# 周会\n\n会议纪要：下周一讨论预算审批流程，张伟负责准备材料。\n",
    "memory/zh-cache.md": "我们把Redis缓存的过期时间改成了五分钟，缓存命中率明显提高。\n",
    "memory/zh-cat.md": "我家的猫叫小白，每天早上七点要喂它。\n",
    "memory/ja-trip.md": "昨日は新宿でラーメンを食べた。来週は東京タワーに行く予定です。\n",
    "memory/ja-work.md": "来月のリリース計画について、田中さんとミーティングしました。\n",
    "memory/ko-budget.md": "다음 주 예산 회의는 목요일 오후 세 시에 열린다.\n",
    "memory/ko-trip.md": "부산 여행은 기차로 가기로 했다. 해운대 근처 호텔을 예약했다.\n",
    "memory/en.md": "Budget review with Alice on Monday; the cache TTL stays at five minutes.\n",
}


@pytest.fixture
def ws(tmp_path: Path, make_settings):
    folder = tmp_path / "ws"
    folder.mkdir()
    db, settings = build(folder, make_settings, NOTES)
    db.close()
    return settings


def top(settings, query: str) -> list[str]:
    out = memory_search(query, settings=settings)
    assert out["mode"] == "keyword-only"
    return [r["path"] for r in out["results"]]


@pytest.mark.parametrize(("query", "expected"), [
    ("会议纪要", "memory/zh-meeting.md"),
    ("预算审批", "memory/zh-meeting.md"),
    ("张伟", "memory/zh-meeting.md"),
    ("缓存命中率", "memory/zh-cache.md"),
    ("猫", "memory/zh-cat.md"),  # one character: a prefix query over the bigrams
    ("ラーメン", "memory/ja-trip.md"),
    ("東京タワー", "memory/ja-trip.md"),
    ("リリース計画", "memory/ja-work.md"),
    ("田中さん", "memory/ja-work.md"),
    ("예산 회의", "memory/ko-budget.md"),
    ("회의는", "memory/ko-budget.md"),
    ("해운대 호텔", "memory/ko-trip.md"),
    ("부산", "memory/ko-trip.md"),
])
def test_cjk_queries_find_the_right_note_first(ws, query: str, expected: str) -> None:
    assert top(ws, query)[0] == expected


@pytest.mark.parametrize(("query", "expected"), [
    ("Redis缓存", "memory/zh-cache.md"),  # no space between scripts
    ("Redis 过期时间", "memory/zh-cache.md"),
    ("cache TTL", "memory/en.md"),
    ("Alice 预算", None),  # both notes match one word each: both are returned
])
def test_mixed_script_queries(ws, query: str, expected: str | None) -> None:
    found = top(ws, query)
    if expected is None:
        assert {"memory/en.md", "memory/zh-meeting.md"} <= set(found)
    else:
        assert found[0] == expected


def test_cjk_query_does_not_match_unrelated_notes(ws) -> None:
    assert top(ws, "東京タワー") == ["memory/ja-trip.md"]
    assert top(ws, "예산") == ["memory/ko-budget.md"]
    assert top(ws, "沙漠") == []


def test_segmentation_shapes() -> None:
    assert index_text("会议纪要") == " 会议 议纪 纪要 要 "
    assert query_text("会议纪要").split() == ["会议", "议纪", "纪要"]
    assert index_text("plain English") == "plain English"
    assert words("Redis缓存!") == ["redis", "缓存"]
    assert build_match_query("猫") == '"猫"*'
    assert build_match_query('"会议纪要" plan') == '"会议 议纪 纪要" OR "plan"'


def test_quoted_cjk_phrase_needs_the_exact_run(ws) -> None:
    assert top(ws, '"会议纪要"') == ["memory/zh-meeting.md"]
    assert top(ws, '"纪要会议"') == []


V1_FTS = """
DROP TRIGGER chunks_fts_insert; DROP TRIGGER chunks_fts_delete; DROP TRIGGER chunks_fts_update;
DROP TABLE chunks_fts;
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text, content='chunks', content_rowid='rowid', tokenize='unicode61');
CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, new.text);
END;
INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
UPDATE meta SET value = '1' WHERE key = 'schema_version';
"""


def test_a_version_1_store_is_reindexed_on_open(tmp_path: Path, make_settings) -> None:
    folder = tmp_path / "ws"
    folder.mkdir()
    db, settings = build(folder, make_settings, NOTES)
    db.conn.executescript(V1_FTS)  # what memq's first schema left on disk
    count = db.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH '\"会议\"'")
    assert count.fetchone()[0] == 0  # unsegmented: the CJK note is one big token
    db.close()
    assert top(settings, "会议纪要")[0] == "memory/zh-meeting.md"  # opening upgraded it
    db = connect(settings.store.path)
    assert schema.get_meta(db, "schema_version") == schema.SCHEMA_VERSION
    # Edits keep the index in step through the triggers: 'delete' must get the segmented text
    # the row was indexed with, or the old tokens would stay and still find the row below.
    db.conn.execute("UPDATE chunks SET text = '新的内容：年度旅行计划' WHERE path = ?",
                    ("memory/zh-cat.md",))
    db.conn.execute("DELETE FROM chunks WHERE path = 'memory/ko-trip.md'")
    db.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    db.close()
    assert top(settings, "旅行计划") == ["memory/zh-cat.md"]
    assert top(settings, "小白") == []
    assert top(settings, "해운대") == []
