//! Spin's variables, looked up once per instance: Spin 4's lookups are async, and the
//! component's settings are read synchronously all the way down (`config`), so the
//! first request of an instance loads every variable the component reads and the
//! instance keeps them (a variable does not change while the app runs).

use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    static LOADED: RefCell<Option<HashMap<&'static str, Result<String, String>>>> =
        const { RefCell::new(None) };
}

/// Looks every variable of `names` up (all the component is given), unless this instance already has them all: a lookup that
/// failed is tried again by the next request, not kept for the instance's life. Two
/// requests that start together may both look them up: they find the same values.
pub async fn load(names: &'static [&'static str]) {
    let complete = |values: &HashMap<_, Result<String, String>>| values.values().all(Result::is_ok);
    if LOADED.with_borrow(|loaded| loaded.as_ref().is_some_and(complete)) {
        return;
    }
    let mut values = HashMap::new();
    for &name in names {
        let value = spin_sdk::variables::get(name).await;
        values.insert(name, value.map_err(|error| error.to_string()));
    }
    LOADED.set(Some(values));
}

pub fn get(name: &str) -> Result<String, String> {
    LOADED.with_borrow(
        |loaded| match loaded.as_ref().and_then(|values| values.get(name)) {
            Some(value) => value.clone(),
            None => Err(format!("{name} was not loaded")),
        },
    )
}
