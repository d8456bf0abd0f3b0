//! What drives the product on the servers (a storefront's HTTP calls, a crowd, the
//! scripts and procedures called as the component calls them, the explorer's schedules),
//! and the invariants a test checks afterwards.

pub mod app;
pub mod crowd;
pub mod explorer;
pub mod invariants;
pub mod purchases;
pub mod scripts;
