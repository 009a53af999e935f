//! Maps key paths (`link[2].up.rate`) to lines of the scenario source, and byte
//! offsets back to key paths, using the span-preserving TOML parser.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::error::line_of_offset;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// Splits `link[2].up.rate` into segments.
pub(crate) fn parse_path(path: &str) -> Vec<Seg> {
    let mut segs = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        if let Some(open) = rest.find('[') {
            let (key, idx) = rest.split_at(open);
            if !key.is_empty() {
                segs.push(Seg::Key(key.to_string()));
            }
            rest = idx;
            for piece in rest.split('[').filter(|p| !p.is_empty()) {
                if let Ok(i) = piece.trim_end_matches(']').parse() {
                    segs.push(Seg::Index(i));
                }
            }
        } else if !rest.is_empty() {
            segs.push(Seg::Key(rest.to_string()));
        }
    }
    segs
}

fn render(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn find_key<'a, 'i>(
    table: &'a DeTable<'i>,
    key: &str,
) -> Option<(
    &'a Spanned<toml::de::DeString<'i>>,
    &'a Spanned<DeValue<'i>>,
)> {
    table.iter().find(|(k, _)| k.get_ref().as_ref() == key)
}

/// The 1-based line where `path` is written, or the line of its deepest
/// existing ancestor.
pub(crate) fn line_of_path(src: &str, path: &str) -> Option<usize> {
    let doc = DeTable::parse(src).ok()?;
    let segs = parse_path(path);
    let mut best: Option<usize> = None;
    let mut cur_table: Option<&DeTable<'_>> = Some(doc.get_ref());
    let mut cur_value: Option<&DeValue<'_>> = None;
    for seg in &segs {
        match seg {
            Seg::Key(k) => {
                let table = match (cur_table, cur_value) {
                    (Some(t), _) => t,
                    (None, Some(DeValue::Table(t))) => t,
                    _ => break,
                };
                let Some((key, value)) = find_key(table, k) else {
                    break;
                };
                best = Some(key.span().start);
                cur_table = None;
                cur_value = Some(value.get_ref());
            }
            Seg::Index(i) => {
                let Some(DeValue::Array(arr)) = cur_value else {
                    break;
                };
                let Some(elem) = arr.get(*i) else { break };
                let span = elem.span();
                if span.start != span.end {
                    best = Some(span.start);
                }
                cur_table = None;
                cur_value = Some(elem.get_ref());
            }
        }
    }
    best.map(|off| line_of_offset(src, off))
}

/// The key path whose key or value contains `offset` (innermost), or the last
/// key written before `offset`.
pub(crate) fn path_at_offset(src: &str, offset: usize) -> Option<String> {
    let doc = DeTable::parse(src).ok()?;
    let mut spans: Vec<(usize, usize, Vec<Seg>)> = Vec::new();
    collect_table(doc.get_ref(), &mut Vec::new(), &mut spans);
    let containing = spans
        .iter()
        .filter(|(s, e, _)| *s <= offset && offset < *e)
        .min_by_key(|(s, e, p)| (e - s, usize::MAX - p.len()));
    let chosen = containing.or_else(|| {
        spans
            .iter()
            .filter(|(s, _, _)| *s <= offset)
            .max_by_key(|(s, _, p)| (*s, p.len()))
    })?;
    Some(render(&chosen.2))
}

fn collect_table(
    table: &DeTable<'_>,
    path: &mut Vec<Seg>,
    out: &mut Vec<(usize, usize, Vec<Seg>)>,
) {
    for (k, v) in table.iter() {
        path.push(Seg::Key(k.get_ref().to_string()));
        let ks = k.span();
        out.push((ks.start, ks.end, path.clone()));
        collect_value(v, path, out);
        path.pop();
    }
}

fn collect_value(
    v: &Spanned<DeValue<'_>>,
    path: &mut Vec<Seg>,
    out: &mut Vec<(usize, usize, Vec<Seg>)>,
) {
    let vs = v.span();
    if vs.start != vs.end {
        out.push((vs.start, vs.end, path.clone()));
    }
    match v.get_ref() {
        DeValue::Table(t) => collect_table(t, path, out),
        DeValue::Array(a) => {
            for (i, e) in a.iter().enumerate() {
                path.push(Seg::Index(i));
                collect_value(e, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "name = \"x\"\n\n[[link]]\nname = \"a\"\nrate = \"1Mbit/s\"\n\n[[link]]\nname = \"b\"\nrate = \"2Mbit/s\"\n[link.up]\ndelay = \"5ms\"\n";

    #[test]
    fn paths_parse() {
        assert_eq!(
            parse_path("link[2].up.rate"),
            vec![
                Seg::Key("link".into()),
                Seg::Index(2),
                Seg::Key("up".into()),
                Seg::Key("rate".into())
            ]
        );
        assert_eq!(
            render(&parse_path("host[0].interfaces[1].addr")),
            "host[0].interfaces[1].addr"
        );
    }

    #[test]
    fn lines_of_paths() {
        assert_eq!(line_of_path(SRC, "name"), Some(1));
        assert_eq!(line_of_path(SRC, "link[0].rate"), Some(5));
        assert_eq!(line_of_path(SRC, "link[1].name"), Some(8));
        assert_eq!(line_of_path(SRC, "link[1].up.delay"), Some(11));
        // Missing leaf: the deepest existing ancestor.
        assert_eq!(
            line_of_path(SRC, "link[1].queue"),
            line_of_path(SRC, "link[1]")
        );
    }

    #[test]
    fn offsets_to_paths() {
        let off = SRC.find("2Mbit").unwrap();
        assert_eq!(path_at_offset(SRC, off).as_deref(), Some("link[1].rate"));
        let off = SRC.find("5ms").unwrap();
        assert_eq!(
            path_at_offset(SRC, off).as_deref(),
            Some("link[1].up.delay")
        );
    }
}
