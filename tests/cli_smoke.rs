mod common;

#[test]
fn help_and_bad_flags() {
    let o = common::run(&["--help"], None);
    assert_eq!(o.status.code(), Some(0));
    let o = common::run(&["--no-such-flag"], None);
    assert_eq!(o.status.code(), Some(2));
}
