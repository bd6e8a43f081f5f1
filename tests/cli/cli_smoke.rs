use crate::support;

#[test]
fn help_and_bad_flags() {
    let o = support::run(&["--help"], None);
    assert_eq!(o.status.code(), Some(0));
    let o = support::run(&["--no-such-flag"], None);
    assert_eq!(o.status.code(), Some(2));
}
