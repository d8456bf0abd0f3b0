//! A request's Redis and MySQL: the connections (`backends`), Redis routed to a server or a
//! cluster's node (`redis`), MySQL's statements (`db`), and the drivers that run
//! `seckill_core`'s machines on them (`returns`).

pub mod backends;
pub mod db;
pub mod redis;
pub mod returns;
