use super::*;

struct Map(Vec<(&'static str, &'static str)>);

impl Lookup for Map {
    fn value(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    }
}

fn x(value: &str, map: &[(&'static str, &'static str)]) -> Result<String, ExpandError> {
    expand(value, &Map(map.to_vec()))
}

#[test]
fn logical_lines_comments_and_the_last_setting() {
    let text = b"# comment\nmyhostname = mx.example.com\n\nmydestination = $myhostname,\n    localhost\n  # a comment inside\n\tlocalhost.$mydomain\nmyhostname=mx2.example.com  \r\n";
    let cf = MainCf::parse(text).unwrap();
    assert_eq!(cf.raw("myhostname"), Some("mx2.example.com"));
    assert_eq!(cf.param("myhostname").unwrap().line, 8);
    assert_eq!(
        cf.raw("mydestination"),
        Some("$myhostname, localhost localhost.$mydomain")
    );
    assert_eq!(cf.params.len(), 2);
    let service = MainCf::parse(b"smtp-amavis_destination_concurrency_limit = 2\n").unwrap();
    assert_eq!(
        service.raw("smtp-amavis_destination_concurrency_limit"),
        Some("2")
    );
}

#[test]
fn hostile_files_are_errors_that_name_the_line() {
    assert_eq!(
        MainCf::parse(b"a = b\n\0junk").unwrap_err(),
        ParseError::Binary(2)
    );
    assert_eq!(
        MainCf::parse(b"  orphan\n").unwrap_err(),
        ParseError::Orphan(1)
    );
    assert!(matches!(
        MainCf::parse(b"a = b\nno equals sign\n").unwrap_err(),
        ParseError::NotASetting(2, _)
    ));
    assert!(matches!(
        MainCf::parse(b"bad name = 1\n").unwrap_err(),
        ParseError::NotASetting(1, _)
    ));
    let big = vec![b'#'; MAX_BYTES + 1];
    assert_eq!(MainCf::parse(&big).unwrap_err(), ParseError::TooLarge);
}

#[test]
fn expansion_forms_as_postconf() {
    let m = [
        ("myhostname", "mx.example.com"),
        ("mydomain", "example.com"),
        ("empty", ""),
        ("nested", "$myhostname/${mydomain}/$(mydomain)"),
    ];
    assert_eq!(
        x("$nested", &m).unwrap(),
        "mx.example.com/example.com/example.com"
    );
    assert_eq!(x("${myhostname?yes}", &m).unwrap(), "yes");
    assert_eq!(x("${empty?yes}", &m).unwrap(), "");
    assert_eq!(x("${empty:no}", &m).unwrap(), "no");
    assert_eq!(x("${myhostname:no}", &m).unwrap(), "");
    assert_eq!(x("${myhostname?{a b}:{c}}", &m).unwrap(), "a b");
    assert_eq!(x("${empty?{a b}:{c}}", &m).unwrap(), "c");
    assert_eq!(x("${unset?{$mydomain}}", &m).unwrap(), "");
    assert_eq!(x("cost $$5 and $", &m).unwrap(), "cost $5 and $");
}

#[test]
fn relational_forms_as_compatibility_level_uses_them() {
    let def = "${{$compatibility_level} <level {2} ? {$mydestination} : {}}";
    let old = [("compatibility_level", "0"), ("mydestination", "a, b")];
    let new = [("compatibility_level", "3.6"), ("mydestination", "a, b")];
    assert_eq!(x(def, &old).unwrap(), "a, b");
    assert_eq!(x(def, &new).unwrap(), "");
    let eq = "${{$level} == {dane} ? {dane} : {may}}";
    assert_eq!(x(eq, &[("level", "dane")]).unwrap(), "dane");
    assert_eq!(x(eq, &[("level", "encrypt")]).unwrap(), "may");
    assert_eq!(x("${{10} < {9} ? {y} : {n}}", &[]).unwrap(), "n");
    assert!(matches!(
        x("${{a} ~~ {b} ? {y}}", &[]),
        Err(ExpandError::Malformed(_))
    ));
}

#[test]
fn loops_and_blowups_are_errors() {
    assert_eq!(
        x("$a", &[("a", "x $b"), ("b", "$a")]).unwrap_err(),
        ExpandError::Loop("a".into())
    );
    assert_eq!(
        x("$a", &[("a", "$a")]).unwrap_err(),
        ExpandError::Loop("a".into())
    );
    // Doubling at each level: 1 GiB unless bounded.
    let p0: &'static str = "x".repeat(1024).leak();
    let mut m = vec![("p0", p0)];
    let names: Vec<String> = (1..=20).map(|i| format!("p{i}")).collect();
    let values: Vec<String> = (1..=20).map(|i| format!("$p{0}$p{0}", i - 1)).collect();
    for (n, v) in names.iter().zip(&values) {
        m.push((
            Box::leak(n.clone().into_boxed_str()),
            Box::leak(v.clone().into_boxed_str()),
        ));
    }
    assert_eq!(x("$p20", &m).unwrap_err(), ExpandError::TooLong);
    assert!(matches!(
        x("${unclosed", &[]),
        Err(ExpandError::Malformed(_))
    ));
}

#[test]
fn work_is_bounded_when_nothing_grows() {
    let names: Vec<String> = (0..=25).map(|i| format!("q{i}")).collect();
    let values: Vec<String> = (0..=25)
        .map(|i| match i {
            0 => String::new(),
            _ => format!("$q{0}$q{0}", i - 1),
        })
        .collect();
    let m: Vec<(&'static str, &'static str)> = names
        .iter()
        .zip(&values)
        .map(|(n, v)| -> (&'static str, &'static str) {
            (
                Box::leak(n.clone().into_boxed_str()),
                Box::leak(v.clone().into_boxed_str()),
            )
        })
        .collect();
    assert_eq!(x("$q25", &m).unwrap_err(), ExpandError::TooMuchWork);
}
