//! A library that cannot be loaded is `Status::Load`, naming the path and `PKV_LIBRARY` (its own
//! test binary: `pkv::library()` loads once per process).
use pkv::Status;

#[test]
fn a_bad_pkv_library_names_the_path_and_the_variable() {
    std::env::set_var(pkv::LIBRARY_ENV, "/nonexistent/libpkv.so.1");
    let err = pkv::library().unwrap_err();
    assert_eq!(err.status(), Status::Load, "{}", err);
    assert!(err.message().contains("/nonexistent/libpkv.so.1"), "{}", err);
    assert!(err.message().contains("PKV_LIBRARY"), "{}", err);
    assert_eq!(pkv::library().unwrap_err(), err, "the result is kept");
    assert_eq!(pkv::Params::new().unwrap_err().status(), Status::Load);
}
