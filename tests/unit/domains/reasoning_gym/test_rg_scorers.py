"""The scorer audit: re-auditing a few domains agrees with the checked-in decisions, every domain has one."""

from __future__ import annotations

import pytest

from posttrain.domains.reasoning_gym import source as rg
from posttrain.domains.reasoning_gym import audit as rg_audit
from posttrain.domains.reasoning_gym import scorers as rg_scorers

REAUDIT = ["basic_arithmetic", "chain_sum", "gcd", "leg_counting", "graph_color", "number_sorting", "rush_hour"]


@pytest.mark.parametrize("domain", REAUDIT)
def test_reaudit_agrees_with_checked_in_data(domain):
    saved = rg_scorers.decisions()[domain]
    row = rg_audit.audit_domain(domain, n=saved["n"])
    for key in ("gold", *rg_scorers.WRONG, *rg_scorers.VARIANTS, "max_wrong", "partial", "credit"):
        assert row[key] == saved[key], (domain, key, row[key], saved[key])


def test_basic_arithmetic_negated_answer_gets_credit_so_it_defaults_to_full_marks_only():
    row = rg_audit.audit_domain("basic_arithmetic", n=10)
    assert row["gold"] == 1.0 and 0.0 < row["negate"] < 1.0
    assert row["partial"] and row["credit"] == "full" == rg_scorers.default_credit("basic_arithmetic")


def test_every_domain_has_a_checked_in_decision_and_a_docs_row():
    saved = rg_scorers.decisions()
    doc = rg_scorers.DOC.read_text()
    for domain in rg.list_domains():
        assert saved[domain]["credit"] in rg.CREDITS, domain
        assert f"\n| {domain} |" in doc, domain
    for domain, row in saved.items():  # full-marks-only never applies where the gold itself scores below 1
        if row.get("gold") is not None:
            assert row["gold_min"] == 1.0 or row["credit"] == "partial", domain
        if row.get("partial"):
            assert row["credit"] == "full" or domain in rg_scorers.NO_GOLD, domain


def test_probes_change_the_gold():
    p = rg_audit.probes("12", "7")
    assert p["edit"] == "13" and p["negate"] == "-12" and p["other"] == "7" and p["empty"] == ""
    assert rg_audit.probes("-4", "-4")["negate"] == "4" and rg_audit.probes("-4", "-4")["other"] is None
    assert rg_audit.probes("abc", None)["edit"] == "aba" and rg_audit.probes("abc", None)["negate"] is None
    assert rg_audit.probes(None, "1")["edit"] is None


def test_unaudited_domain_defaults_to_full_marks():
    assert rg_scorers.default_credit("no_such_domain") == "full"
    assert rg_scorers.item_seconds("no_such_domain") == 0.0


def test_audit_scorers_command_checks_against_the_checked_in_data():
    from typer.testing import CliRunner

    from posttrain.core.errors import ConfigError
    from posttrain.cli.tasks import app

    ok = CliRunner().invoke(app, ["audit-scorers", "--domains", "chain_sum,gcd", "--check"])
    assert ok.exit_code == 0, ok.output
    assert "chain_sum" in ok.output and "2 reasoning-gym domains" in ok.output
    partial = CliRunner().invoke(app, ["audit-scorers", "--domains", "chain_sum", "--write"])
    assert isinstance(partial.exception, ConfigError) and "--write rewrites the whole table" in str(partial.exception)
    unknown = CliRunner().invoke(app, ["audit-scorers", "--domains", "chain_summ"])
    assert isinstance(unknown.exception, ConfigError) and "did you mean chain_sum" in str(unknown.exception)
