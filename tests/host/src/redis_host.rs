//! `fermyon:spin/redis@2.0.0` against a real Redis, mirroring Spin's outbound
//! Redis: every `open` makes a new multiplexed connection with the `redis`
//! crate (same 0.32 line as Spin, so error texts match), and `execute` turns
//! the reply into a flat list of results.

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, ErrorKind, RedisError, Value};
use wasmtime::component::Resource;

use crate::bindings::fermyon::spin::redis::{
    Error, Host, HostConnection, RedisParameter, RedisResult,
};
use crate::instance::SpinHost;

/// The host side of a guest's `connection` resource.
pub struct RedisConnection(MultiplexedConnection);

/// Host results: the outer `Err` traps, the inner one goes to the guest.
type HostResult<T> = anyhow::Result<Result<T, Error>>;

impl SpinHost {
    /// A handle on the guest's connection. Multiplexed connections are cheap
    /// clones, which keeps `self` free while a command is in flight.
    fn redis(&self, conn: &Resource<RedisConnection>) -> anyhow::Result<MultiplexedConnection> {
        Ok(self.table.get(conn)?.0.clone())
    }
}

/// Spin reports every driver and server error as `other` with the error's
/// `Display` text (e.g. `NOSCRIPT: No matching script...`).
fn other(e: RedisError) -> Error {
    Error::Other(e.to_string())
}

impl Host for SpinHost {}

impl HostConnection for SpinHost {
    async fn open(&mut self, address: String) -> HostResult<Resource<RedisConnection>> {
        if !self.component.allowed_hosts.allows(&address, "redis") {
            return Ok(Err(Error::InvalidAddress));
        }
        let client = match redis::Client::open(address.as_str()) {
            Ok(client) => client,
            Err(_) => return Ok(Err(Error::InvalidAddress)),
        };
        match client.get_multiplexed_async_connection().await {
            Ok(conn) => Ok(Ok(self.table.push(RedisConnection(conn))?)),
            Err(e) => Ok(Err(other(e))),
        }
    }

    async fn publish(
        &mut self,
        conn: Resource<RedisConnection>,
        channel: String,
        payload: Vec<u8>,
    ) -> HostResult<()> {
        let mut c = self.redis(&conn)?;
        Ok(c.publish::<_, _, ()>(&channel, &payload)
            .await
            .map_err(other))
    }

    async fn get(
        &mut self,
        conn: Resource<RedisConnection>,
        key: String,
    ) -> HostResult<Option<Vec<u8>>> {
        let mut c = self.redis(&conn)?;
        Ok(c.get(&key).await.map_err(other))
    }

    async fn set(
        &mut self,
        conn: Resource<RedisConnection>,
        key: String,
        value: Vec<u8>,
    ) -> HostResult<()> {
        let mut c = self.redis(&conn)?;
        Ok(c.set::<_, _, ()>(&key, &value).await.map_err(other))
    }

    async fn incr(&mut self, conn: Resource<RedisConnection>, key: String) -> HostResult<i64> {
        let mut c = self.redis(&conn)?;
        Ok(c.incr(&key, 1).await.map_err(other))
    }

    async fn del(&mut self, conn: Resource<RedisConnection>, keys: Vec<String>) -> HostResult<u32> {
        let mut c = self.redis(&conn)?;
        Ok(c.del(&keys).await.map_err(other))
    }

    async fn sadd(
        &mut self,
        conn: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> HostResult<u32> {
        let mut c = self.redis(&conn)?;
        // The one place Spin reports `type-error` rather than `other`.
        Ok(c.sadd(&key, &values).await.map_err(|e| {
            if e.kind() == ErrorKind::TypeError {
                Error::TypeError
            } else {
                other(e)
            }
        }))
    }

    async fn smembers(
        &mut self,
        conn: Resource<RedisConnection>,
        key: String,
    ) -> HostResult<Vec<String>> {
        let mut c = self.redis(&conn)?;
        Ok(c.smembers(&key).await.map_err(other))
    }

    async fn srem(
        &mut self,
        conn: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> HostResult<u32> {
        let mut c = self.redis(&conn)?;
        Ok(c.srem(&key, &values).await.map_err(other))
    }

    async fn execute(
        &mut self,
        conn: Resource<RedisConnection>,
        command: String,
        arguments: Vec<RedisParameter>,
    ) -> HostResult<Vec<RedisResult>> {
        let mut c = self.redis(&conn)?;
        let mut cmd = redis::cmd(&command);
        for argument in arguments {
            match argument {
                RedisParameter::Int64(v) => cmd.arg(v),
                RedisParameter::Binary(v) => cmd.arg(v),
            };
        }
        let reply: Result<Value, RedisError> = cmd.query_async(&mut c).await;
        Ok(reply.and_then(|v| flatten(&v)).map_err(other))
    }

    async fn drop(&mut self, conn: Resource<RedisConnection>) -> anyhow::Result<()> {
        self.table.delete(conn)?;
        Ok(())
    }
}

/// Converts a reply the way Spin's `execute` does: nested arrays and sets are
/// flattened depth-first into one list; maps, attributes, verbatim strings
/// and pushes are type errors.
pub fn flatten(value: &Value) -> Result<Vec<RedisResult>, RedisError> {
    fn unsupported(what: &str) -> RedisError {
        RedisError::from((
            ErrorKind::TypeError,
            "Could not convert Redis response",
            format!("Redis {what} is not supported"),
        ))
    }
    fn walk(value: &Value, out: &mut Vec<RedisResult>) -> Result<(), RedisError> {
        out.push(match value {
            Value::Nil => RedisResult::Nil,
            Value::Int(v) => RedisResult::Int64(*v),
            Value::BulkString(bytes) => RedisResult::Binary(bytes.clone()),
            Value::SimpleString(s) => RedisResult::Status(s.clone()),
            Value::Okay => RedisResult::Status("OK".to_string()),
            Value::Double(v) => RedisResult::Binary(v.to_string().into_bytes()),
            Value::Boolean(v) => RedisResult::Int64(i64::from(*v)),
            Value::BigNumber(v) => RedisResult::Binary(v.to_string().into_bytes()),
            Value::Array(items) | Value::Set(items) => {
                return items.iter().try_for_each(|item| walk(item, out));
            }
            Value::Map(_) => return Err(unsupported("Map type")),
            Value::Attribute { .. } => return Err(unsupported("Attribute type")),
            Value::VerbatimString { .. } => {
                return Err(unsupported("string with format attribute"))
            }
            Value::Push { .. } => return Err(unsupported("Pub/Sub types are")),
            Value::ServerError(err) => {
                return Err(RedisError::from((
                    ErrorKind::ResponseError,
                    "Server error",
                    format!("{err:?}"),
                )))
            }
        });
        Ok(())
    }
    let mut out = Vec::new();
    walk(value, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn scalars_map_to_wit_variants() {
        let cases = [
            (Value::Nil, RedisResult::Nil),
            (Value::Int(-7), RedisResult::Int64(-7)),
            (bulk("x"), RedisResult::Binary(b"x".to_vec())),
            (
                Value::SimpleString("PONG".into()),
                RedisResult::Status("PONG".into()),
            ),
            (Value::Okay, RedisResult::Status("OK".into())),
            (Value::Boolean(true), RedisResult::Int64(1)),
            (Value::Double(1.5), RedisResult::Binary(b"1.5".to_vec())),
        ];
        for (value, expected) in cases {
            let got = flatten(&value).unwrap();
            assert_eq!(format!("{got:?}"), format!("{:?}", [expected]));
        }
    }

    #[test]
    fn nested_arrays_are_flattened_depth_first() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Array(vec![
                bulk("a"),
                Value::Array(vec![Value::Nil, Value::Int(2)]),
            ]),
            Value::Array(vec![]),
            Value::Set(vec![bulk("s")]),
        ]);
        let got = flatten(&reply).unwrap();
        let expected = [
            RedisResult::Int64(1),
            RedisResult::Binary(b"a".to_vec()),
            RedisResult::Nil,
            RedisResult::Int64(2),
            RedisResult::Binary(b"s".to_vec()),
        ];
        assert_eq!(format!("{got:?}"), format!("{expected:?}"));
        assert!(flatten(&Value::Array(vec![])).unwrap().is_empty());
    }

    #[test]
    fn maps_are_type_errors_even_when_nested() {
        let map = Value::Map(vec![(bulk("k"), bulk("v"))]);
        for reply in [map.clone(), Value::Array(vec![Value::Int(1), map])] {
            let err = flatten(&reply).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::TypeError);
            assert!(
                err.to_string().contains("Map type is not supported"),
                "{err}"
            );
        }
    }
}
