//! Pages of a list: `?limit=N&after=CURSOR`, the answer's `next` being the cursor of the
//! page after (`null` on the last). Lists are in name order and the cursor is the last
//! name shown, so a page stays right while items are added or removed around it.

use serde::Deserialize;

use super::error::{ApiError, Result};

/// The most items a page holds.
pub(crate) const MAX_PAGE: usize = 1000;

/// `?limit=N&after=CURSOR`; without `limit`, the whole list (bounded by the caps on
/// what it lists), as before pages existed.
#[derive(Debug, Deserialize)]
pub(crate) struct Page {
    limit: Option<usize>,
    after: Option<String>,
}

impl Page {
    /// The items of this page from `items` (in `key` order), and the next cursor.
    pub(crate) fn of<T>(
        &self,
        items: impl IntoIterator<Item = T>,
        key: impl Fn(&T) -> &str,
    ) -> Result<(Vec<T>, Option<String>)> {
        let limit = match self.limit {
            None => usize::MAX,
            Some(n @ 1..=MAX_PAGE) => n,
            Some(_) => {
                return Err(
                    ApiError::bad_request(format!("limit is 1 to {MAX_PAGE}")).field("limit")
                )
            }
        };
        let after = self.after.as_deref();
        let mut items = items
            .into_iter()
            .filter(|item| after.is_none_or(|after| key(item) > after));
        let page: Vec<T> = items.by_ref().take(limit).collect();
        let next = match items.next() {
            Some(_) => page.last().map(|item| key(item).to_owned()),
            None => None,
        };
        Ok((page, next))
    }
}
