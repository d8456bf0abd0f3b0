//! Where Spin hands the component a request, in each build: the entry point reads the
//! request's head and body into [`crate::http`]'s terms, serves it, and sends the answer.

#[cfg(not(target_env = "p2"))]
mod p1;
#[cfg(target_env = "p2")]
mod p3;
