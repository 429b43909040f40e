//! The newest records of an idempotency key, bounded by count.
//!
//! A redelivered request (`client_rename_id`, `client_run_id`, `client_response_id`) is answered from what the
//! original recorded. Redeliveries come soon after the original, so a session keeps only the newest records and its
//! projection does not grow with its history; a key older than that is treated as new.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Records a session remembers per kind of idempotency key.
pub const MAX_RECENT_RECORDS: usize = 1024;

/// The newest `capacity` records by key; inserting beyond it forgets the oldest key.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecentRecords<V> {
    /// Each key is one allocation, shared with `order`: a session's load inserts a record per rename, run and
    /// response it replays.
    records: HashMap<Arc<str>, V>,
    /// Keys, oldest first.
    order: VecDeque<Arc<str>>,
    capacity: usize,
}

impl<V> Default for RecentRecords<V> {
    fn default() -> Self {
        Self::with_capacity(MAX_RECENT_RECORDS)
    }
}

impl<V> RecentRecords<V> {
    pub fn with_capacity(capacity: usize) -> Self {
        RecentRecords { records: HashMap::new(), order: VecDeque::new(), capacity: capacity.max(1) }
    }

    /// Records `value` under `key` (replacing an earlier record of the same key, which keeps its place).
    pub fn insert(&mut self, key: &str, value: V) {
        let key: Arc<str> = Arc::from(key);
        // A key recorded again keeps the map's key, and so its place in `order`; only a new key joins it.
        if self.records.insert(key.clone(), value).is_some() {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.records.remove(&*oldest);
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.records.get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.records.get_mut(key)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_key_is_forgotten_beyond_the_capacity() {
        let mut recent = RecentRecords::with_capacity(3);
        for key in ["a", "b", "c"] {
            recent.insert(key, key.to_uppercase());
        }
        recent.insert("a", "A again".to_owned());
        assert_eq!(recent.len(), 3, "a key recorded again keeps one place");
        recent.insert("d", "D".to_owned());
        assert_eq!(recent.get("a"), None, "the oldest key goes first");
        assert_eq!(recent.get("b").map(String::as_str), Some("B"));
        assert_eq!(recent.get("d").map(String::as_str), Some("D"));
        assert_eq!(recent.len(), 3);
    }
}
