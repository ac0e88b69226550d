use super::*;
use proptest::prelude::*;

#[test]
fn unknown_keys_are_errors_naming_place_key_and_suggestion() {
    let e = Scenario::parse("[[tenant]]\nname='a'\nkind='bw'\nsize=1\nszie=2\n").unwrap_err();
    assert_eq!((e.line, e.column, e.key.as_str()), (5, 1, "szie"), "{e}");
    assert_eq!(e.suggestion.as_deref(), Some("size"), "{e}");
    let s = e.to_string();
    assert!(s.starts_with("<input>:5:1: key `szie`") && s.contains("did you mean `size`"), "{s}");
    let e = Scenario::parse("duraton_ms = 5\n[[tenant]]\nname='a'\nkind='bw'\nsize=1\n").unwrap_err();
    assert_eq!((e.line, e.suggestion.as_deref()), (1, Some("duration_ms")), "{e}");
}

#[test]
fn defaults_fill_in() {
    let s = Scenario::parse("[[tenant]]\nname='a'\nkind='lat'\nsize=16\n").unwrap();
    assert_eq!(s.profile, "cx6-100g");
    assert_eq!(s.tenants[0].qps, 1);
    assert_eq!(s.tenants[0].op, TestOp::Write);
    assert_eq!(s.tenants[0].sizes, SizeDist::Fixed(16));
    assert_eq!(s.tenants[0].active_ns(s.duration_ms), (0, 30_000_000));
}

#[test]
fn bad_values_name_tenant_key_and_line() {
    let e = Scenario::parse("[[tenant]]\nname='a'\nkind='lat'\nsize=16\nqps=2\n").unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (5, "qps"), "{e}");
    assert!(e.message.contains("\"a\""), "{e}");
    let e = Scenario::parse("[[tenant]]\nname='a'\nkind='bw'\nsize='big'\n").unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (4, "size"), "{e}");
    let e = Scenario::parse("[[tenant]]\nname='a'\nkind='bw'\nsize=1\n[[tenant]]\nname='a'\nkind='bw'\nsize=1\n")
        .unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (6, "name"), "{e}");
    let e = Scenario::parse("[[tenant]]\nname='a'\nkind='open'\nsize=16\n").unwrap_err();
    assert_eq!(e.key, "rate_per_s", "{e}");
    assert_eq!(e.line, 1, "a default names the tenant's header: {e}");
}

#[test]
fn phases_open_loop_sizes_and_counts_parse() {
    let s = Scenario::parse(
        "duration_ms = 20\nwarmup_ms = 2\n\
         [[tenant]]\nname='o'\nkind='open'\nrate_per_s=1e6\nsize={ values=[16,4096], weights=[3,1] }\nstart_ms=5\nstop_ms=15\n\
         [[tenant]]\nname='u'\nkind='bw'\nsize={ min=64, max=128 }\ncount=3\n",
    )
    .unwrap();
    assert_eq!(s.tenants.len(), 4);
    assert_eq!(s.tenants[0].active_ns(s.duration_ms), (5_000_000, 15_000_000));
    assert_eq!(s.tenants[0].size, 4096);
    assert_eq!(s.tenants[1].name, "u#1");
    assert_eq!(s.tenants[3].group, "u");
    assert_eq!(s.groups(), vec![("o".to_string(), 0), ("u".to_string(), 1)]);
    let e = Scenario::parse("[[tenant]]\nname='a'\nkind='bw'\nsize={ min=9, max=3 }\n").unwrap_err();
    assert!(e.message.contains("min <= max"), "{e}");
}

/// Pieces of scenario-like text: right and wrong keys, values and headers.
fn fragment() -> impl Strategy<Value = String> {
    let typos = ["szie", "qp", "x", ""];
    let keys = prop::sample::select(TOP_KEYS.iter().chain(TENANT_KEYS).chain(&typos).copied().collect::<Vec<_>>());
    let values = prop::sample::select(vec![
        "1",
        "0",
        "-3",
        "16",
        "1048576",
        "4294967296",
        "1.5",
        "1e309",
        "nan",
        "'a'",
        "\"bw\"",
        "'lat'",
        "'open'",
        "'write'",
        "'read'",
        "true",
        "[1, 2]",
        "{ min = 1, max = 9 }",
        "{ values = [1], weights = [0] }",
        "{ values = [] }",
        "{",
        "]",
        "'",
        "",
        "=",
    ]);
    prop_oneof![
        (keys, values).prop_map(|(k, v)| format!("{k} = {v}")),
        prop::sample::select(vec!["[[tenant]]", "[tenant]", "[x]", "[[", "# c", ""]).prop_map(str::to_string),
        "[ -~]{0,12}",
    ]
}

/// 400 cases in CI; `PROPTEST_CASES=N` runs longer (see docs/security.md).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Whatever the text, parsing returns (no panic), and an error names
    /// the file, a line and column inside the text, and a key.
    #[test]
    fn random_scenario_text_never_panics_and_errors_name_a_place(lines in prop::collection::vec(fragment(), 0..14)) {
        let text = lines.join("\n");
        if let Err(e) = Scenario::parse_named("s.toml", &text) {
            let nlines = text.split('\n').count().max(1);
            prop_assert!(e.line >= 1 && e.line <= nlines, "line {} of {}: {}", e.line, nlines, e);
            prop_assert!(e.column >= 1, "{}", e);
            prop_assert!(!e.key.is_empty(), "{}", e);
            let shown = e.to_string();
            let place = format!("s.toml:{}:{}: key `", e.line, e.column);
            prop_assert!(shown.starts_with(&place), "{}", shown);
        }
    }
}

/// docs/scenarios.md has a table row for every key the parser accepts.
#[test]
fn every_key_is_documented() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios.md")).expect("doc");
    for key in TOP_KEYS.iter().chain(TENANT_KEYS) {
        assert!(doc.contains(&format!("| `{key}` |")), "docs/scenarios.md lacks a row for `{key}`");
    }
}

/// The keys lists match what the parser accepts: each parses in place.
#[test]
fn key_lists_match_the_parser() {
    for key in TENANT_KEYS {
        let e = Scenario::parse(&format!("[[tenant]]\n{key} = []\n")).unwrap_err();
        assert!(!e.message.contains("unknown field"), "{key}: {e}");
    }
    for key in TOP_KEYS.iter().filter(|k| **k != "tenant") {
        let e = Scenario::parse(&format!("{key} = []\n")).unwrap_err();
        assert!(!e.message.contains("unknown field"), "{key}: {e}");
    }
}
