"""Short programs for the library's users, each with a `main(argv)` that the tests run."""
