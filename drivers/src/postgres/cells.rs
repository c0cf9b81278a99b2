//! Result rows as the core's [`Cell`]s, and bound values as `ToSql`.
//!
//! The driver does not interpret rows: it maps each column to a `Cell` by
//! its PostgreSQL type and lets `Statements::decode_reply` judge the shape.

use picolease_core::sql::{Cell, Param, Statement, Value};
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::Row;

/// A column value of any type, read only to learn whether it is NULL.
struct AnyValue;

impl<'a> FromSql<'a> for AnyValue {
    fn from_sql(_: &Type, _: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(AnyValue)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn cell(row: &Row, index: usize) -> Result<Cell, tokio_postgres::Error> {
    let ty = row.columns()[index].type_();
    let cell = if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(index)?.map(Cell::Int)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(index)?
            .map(|v| Cell::Int(v.into()))
    } else if *ty == Type::INT2 {
        row.try_get::<_, Option<i16>>(index)?
            .map(|v| Cell::Int(v.into()))
    } else if [Type::TEXT, Type::VARCHAR, Type::BPCHAR, Type::NAME].contains(ty) {
        row.try_get::<_, Option<String>>(index)?.map(Cell::Text)
    } else {
        row.try_get::<_, Option<AnyValue>>(index)?
            .map(|_| Cell::Other(ty.name().to_string()))
    };
    Ok(cell.unwrap_or(Cell::Null))
}

/// Every row as a vector of cells, in column order.
pub(crate) fn rows_to_cells(rows: &[Row]) -> Result<Vec<Vec<Cell>>, tokio_postgres::Error> {
    rows.iter()
        .map(|row| (0..row.len()).map(|i| cell(row, i)).collect())
        .collect()
}

/// The PostgreSQL type each kind of placeholder is prepared with, so that
/// preparing never depends on type inference (and a table whose columns
/// have other types fails at prepare time with a clear SQLSTATE).
pub(crate) fn param_type(param: Param) -> Type {
    match param {
        Param::Lease | Param::Holder | Param::Batch | Param::Successor | Param::Candidacy => {
            Type::TEXT
        }
        Param::Epoch | Param::TtlMillis | Param::StaleMillis | Param::ReservationMillis => {
            Type::INT8
        }
    }
}

/// A bound value as `ToSql`: `&str` for text, `i64` for integers.
pub(crate) fn to_sql<'a>(value: &'a Value<'a>) -> &'a (dyn ToSql + Sync) {
    match value {
        Value::Text(text) => text,
        Value::Int(int) => int,
    }
}

/// `values` (bound for `statement`, one per placeholder) with the type
/// each is sent as: the parameters of an unnamed statement
/// (`Client::query_typed`).
pub(crate) fn typed<'a>(
    statement: &Statement,
    values: &'a [Value<'a>],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    values
        .iter()
        .zip(statement.params())
        .map(|(value, param)| (to_sql(value), param_type(*param)))
        .collect()
}
