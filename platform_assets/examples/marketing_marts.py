"""A mart built on deltaport's lake, as a data team would write one: units sold per store, as of
every delta of the `marketing` datamart (the seed's view `stores_by_sold_products`, kept as a
table with its history). The demo lists this module under `code:`, so the lineage in the UI runs
kafka topic -> marketing/increment -> marketing/snapshot -> marketing/sales_by_store.
"""

from platform_assets.build_on import delta_asset
from platform_assets.build_on_view import DeltaView


@delta_asset(source="marketing")
def sales_by_store(view: DeltaView):
    """Units sold per store as of each delta of marketing (lake.marketing_marts.sales_by_store)."""
    from pyspark.sql import functions as F

    sales = view.table("sales")
    return sales.groupBy("store_id").agg(F.sum("product_units").cast("bigint").alias("product_amount"))
