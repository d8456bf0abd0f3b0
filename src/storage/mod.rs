//! A request's Redis and MySQL: the connections and the machines' port on them (`connections`), Redis routed to a server or a
//! cluster's node (`redis`), MySQL's statements (`db`), the drivers that run
//! `seckill_core`'s machines on them (`returns`), and settles taken in turns (`turns`).

pub mod connections;
pub mod db;
pub mod redis;
pub mod returns;
pub mod turns;
