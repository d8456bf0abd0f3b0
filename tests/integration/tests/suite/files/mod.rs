mod component_imports;
mod deploy;
mod module_layers;
