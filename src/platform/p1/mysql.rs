//! MySQL on Spin 2's outbound MySQL API (`fermyon:spin/mysql@2.0.0`): the connection a
//! request opens, its calls synchronous (the instance serves that one request alone).
//! The async signatures are the WASIp3 build's, so that the storage's `Db` is one for both.

use spin_sdk::mysql::{self, Row};

pub use spin_sdk::mysql::{DbValue, MysqlError as Error, ParameterValue};

/// The request's connection.
pub struct Connection(mysql::Connection);

impl Connection {
    pub async fn open(url: &str) -> Result<Connection, Error> {
        mysql::Connection::open(url).map(Connection)
    }

    pub async fn query(
        &self,
        statement: &str,
        params: &[ParameterValue],
    ) -> Result<Vec<Row>, Error> {
        Ok(self.0.query(statement, params)?.rows)
    }

    pub async fn execute(&self, statement: &str, params: &[ParameterValue]) -> Result<(), Error> {
        self.0.execute(statement, params)
    }
}
