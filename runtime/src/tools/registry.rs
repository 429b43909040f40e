//! The set of tools a run offers, by name.

use std::collections::BTreeMap;

use troupe_protocol::types::tool_output::ToolDescriptor;

use super::{
    EditFileTool, ListDirTool, ReadFileTool, SearchTool, ShellTool, Tool, ToolDefinition, WebFetchTool, WriteFileTool,
};

/// Tools by name. A `BTreeMap` keeps [`ToolRegistry::specs`] in name order, so the tool list a model receives is
/// byte-for-byte stable across runs and prompt caches stay warm.
#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Box<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every built-in tool.
    pub fn builtin() -> Self {
        let mut registry = Self::new();
        registry.register(Box::new(ShellTool));
        registry.register(Box::new(ReadFileTool));
        registry.register(Box::new(WriteFileTool));
        registry.register(Box::new(EditFileTool));
        registry.register(Box::new(ListDirTool));
        registry.register(Box::new(SearchTool));
        registry.register(Box::new(WebFetchTool::new()));
        registry
    }

    /// Adds a tool, replacing any tool of the same name.
    pub fn register(&mut self, tool: Box<dyn Tool>) {
        self.tools.insert(tool.definition().name, tool);
    }

    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools.get(name).map(|tool| tool.as_ref())
    }

    /// The definitions of every tool, sorted by name.
    pub fn specs(&self) -> Vec<ToolDefinition> {
        self.tools.values().map(|tool| tool.definition()).collect()
    }

    /// Every tool as `tools.list` describes it, sorted by name.
    pub fn descriptors(&self) -> Vec<ToolDescriptor> {
        self.tools
            .values()
            .map(|tool| {
                let ToolDefinition { name, description, .. } = tool.definition();
                ToolDescriptor { name, description, output_channels: tool.output_channels() }
            })
            .collect()
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_list().entries(self.tools.keys()).finish()
    }
}
