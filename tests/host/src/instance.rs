//! Per-request state behind the Spin imports, and the small
//! `fermyon:spin/variables` implementation.

use std::sync::Arc;

use wasmtime::component::ResourceTable;

use crate::allowed_hosts::AllowedHosts;
use crate::bindings::fermyon::spin::variables;
use crate::variables::{GetError, Resolver};
use crate::Faults;

/// What the host knows about the component being run; shared by all of its
/// instances.
#[derive(Debug)]
pub struct ComponentEnv {
    pub id: String,
    pub allowed_hosts: AllowedHosts,
    pub variables: Arc<Resolver>,
}

/// The store-side state of the Spin imports for one instance (one request).
pub struct SpinHost {
    pub component: Arc<ComponentEnv>,
    pub faults: Arc<Faults>,
    /// Redis and MySQL connections the guest holds. Separate from the WASI
    /// table, like Spin's per-factor tables: resources die with the instance.
    pub table: ResourceTable,
}

impl SpinHost {
    pub fn new(component: Arc<ComponentEnv>, faults: Arc<Faults>) -> Self {
        Self {
            component,
            faults,
            table: ResourceTable::new(),
        }
    }
}

impl variables::Host for SpinHost {
    async fn get(&mut self, name: String) -> anyhow::Result<Result<String, variables::Error>> {
        let component = &self.component;
        Ok(component
            .variables
            .get(&component.id, &name)
            .map_err(|e| match e {
                GetError::InvalidName(msg) => variables::Error::InvalidName(msg),
                GetError::Undefined(msg) => variables::Error::Undefined(msg),
            }))
    }
}
