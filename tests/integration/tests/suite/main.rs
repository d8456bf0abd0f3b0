//! Every integration and end-to-end test of the component, as one test binary (one link
//! of tokio, reqwest, mysql_async and redis), its suites grouped by what they need:
//!
//! - `files`: nothing running (the sources, the manifests, the built component's imports);
//! - `backends`: the real Redis and MariaDB (the Lua scripts, the SQL, the schedule
//!   explorer);
//! - `spin`: the built component served by `spin up`, on those backends or on servers of
//!   the test's own.
//!
//! `scripts/suites.sh` runs the suites one at a time, as each assumes it has the shared
//! Redis and MariaDB to itself (some count their commands); pick a subset by module path:
//! `scripts/suites.sh spin::http_api`, or `cargo test -p seckill-tests --test suite --
//! backends::returns::` for one suite's tests.

mod backends;
mod files;
mod spin;
