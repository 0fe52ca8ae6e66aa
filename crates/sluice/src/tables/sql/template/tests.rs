use super::*;

fn needs(query: &str, result: &str) -> Needs {
    let mut n = Needs::default();
    n.add(query, true).unwrap();
    n.add(result, false).unwrap();
    n
}

#[test]
fn a_quoted_expansion_is_a_parameter() {
    let s = compile("SELECT a FROM t WHERE b='%s' AND c = '%d'", Flavour::Pgsql).unwrap();
    assert_eq!(s.sql, "SELECT a FROM t WHERE b=$1 AND c = $2");
    assert_eq!(s.params, [Part::Key, Part::Domain]);
    let s = compile("SELECT a FROM t WHERE b='%s'", Flavour::Mysql).unwrap();
    assert_eq!(s.sql, "SELECT a FROM t WHERE b=?");
    let s = compile("SELECT a FROM t WHERE b='%s'", Flavour::Sqlite).unwrap();
    assert_eq!(s.sql, "SELECT a FROM t WHERE b=?1");
}

#[test]
fn mixed_literals_are_concatenations() {
    let s = compile(
        "SELECT 'x' WHERE a LIKE '%u@%d%%' AND b='it''s'",
        Flavour::Pgsql,
    )
    .unwrap();
    assert_eq!(
        s.sql,
        "SELECT 'x' WHERE a LIKE ($1 || '@' || $2 || '%') AND b='it''s'"
    );
    assert_eq!(s.params, [Part::Local, Part::Domain]);
    let s = compile("SELECT \"%\" WHERE a = \"pre%1\"", Flavour::Mysql);
    assert!(s.is_err(), "a lone % in a literal is an invalid expansion");
    let s = compile("SELECT 1 WHERE a = \"pre%1\"", Flavour::Mysql).unwrap();
    assert_eq!(s.sql, "SELECT 1 WHERE a = CONCAT(\"pre\", ?)");
    assert_eq!(s.params, [Part::Label(1)]);
    let s = compile("SELECT 1 WHERE a = E'\\t%s'", Flavour::Pgsql).unwrap();
    assert_eq!(s.sql, "SELECT 1 WHERE a = (E'\\t' || $1)");
}

#[test]
fn outside_quotes_comments_identifiers() {
    let s = compile(
        "SELECT 100 %% 7, a FROM t WHERE id = %s -- %s\n",
        Flavour::Pgsql,
    )
    .unwrap();
    assert_eq!(s.sql, "SELECT 100 % 7, a FROM t WHERE id = $1 -- s\n");
    assert_eq!(s.params, [Part::Key]);
    assert!(compile("SELECT \"%s\" FROM t", Flavour::Pgsql).is_err());
    assert!(compile("SELECT `%s` FROM t", Flavour::Mysql).is_err());
    assert!(compile("SELECT a FROM t WHERE b = $1", Flavour::Pgsql).is_err());
    assert!(compile("SELECT a FROM t WHERE b = ?", Flavour::Mysql).is_err());
    assert!(compile("SELECT a FROM t WHERE b = :k", Flavour::Sqlite).is_err());
    assert!(compile("SELECT a FROM t WHERE b = 'x", Flavour::Sqlite).is_err());
    assert!(compile("SELECT a FROM t WHERE b = '\\%s'", Flavour::Mysql).is_err());
    assert!(compile("SELECT '%x'", Flavour::Sqlite).is_err());
}

#[test]
fn keys_postfix_would_not_look_up() {
    let n = needs("'%s'", "%s");
    assert!(Key::split("", &n).is_none());
    assert!(Key::split("user", &n).is_some());
    let n = needs("'%d'", "%s");
    assert!(Key::split("user", &n).is_none());
    assert!(Key::split("user@", &n).is_none());
    assert!(Key::split("@example.com", &n).is_some());
    let n = needs("'%u'", "%s");
    assert!(Key::split("@example.com", &n).is_none());
    assert_eq!(Key::split("user", &n).unwrap().part(Part::Local), "user");
    let n = needs("'%2'", "%s");
    assert!(Key::split("a@com", &n).is_none());
    let k = Key::split("a@b@mail.example.com", &n).unwrap();
    assert_eq!(k.part(Part::Local), "a@b");
    assert_eq!(k.part(Part::Label(2)), "example");
    // result_format's %D needs a domain in the key too.
    let n = needs("'%s'", "%D");
    assert!(Key::split("user", &n).is_none());
}

#[test]
fn result_format() {
    let n = needs("'%s'", "%u at %d for %S/%U/%D/%1 %%");
    let k = Key::split("key@dom.test", &n).unwrap();
    assert_eq!(
        k.format("%u at %d for %S/%U/%D/%1 %%", "v@w", &n)
            .as_deref(),
        Some("v at w for key@dom.test/key/dom.test/test %")
    );
    assert_eq!(k.format("%u at %d", "nodomain", &n), None);
    assert_eq!(k.format("%s", "", &n), None);
}
