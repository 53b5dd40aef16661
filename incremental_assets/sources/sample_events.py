"""What a generated event looks like: the catalogue of apps, pages, places, agents and
traffic sources the sample draws from, and every atomic column built from a skeleton row and
its choices (`generator` lays out the skeleton)."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from incremental_assets.sources.schema import MONEY
from incremental_assets.sources.seeded_random import between, choose, hex16, lookup

APPS = [  # app_id, platform, host, share of users, share of sessions ending in a purchase
    ("web", "web", "www.example.com", 0.55, 0.03),
    ("mobile", "mob", "app.example.com", 0.25, 0.05),
    ("shop", "web", "shop.example.com", 0.20, 0.15),
]

PAGES = [  # path, title, weight
    ("/", "Home", 0.30),
    ("/products", "Products", 0.15),
    ("/products/shoes", "Shoes", 0.10),
    ("/products/bags", "Bags", 0.08),
    ("/products/hats", "Hats", 0.05),
    ("/blog", "Blog", 0.08),
    ("/blog/incremental-models", "Incremental models", 0.05),
    ("/pricing", "Pricing", 0.07),
    ("/about", "About us", 0.04),
    ("/cart", "Cart", 0.05),
    ("/search", "Search", 0.03),
]
CHECKOUT_PAGE = ("/checkout/complete", "Order complete")

GEOS = [  # country, timezone, city, language, weight
    ("US", "America/New_York", "New York", "en-US", 0.30),
    ("US", "America/Los_Angeles", "Los Angeles", "en-US", 0.10),
    ("GB", "Europe/London", "London", "en-GB", 0.15),
    ("DE", "Europe/Berlin", "Berlin", "de-DE", 0.10),
    ("FR", "Europe/Paris", "Paris", "fr-FR", 0.08),
    ("NL", "Europe/Amsterdam", "Amsterdam", "nl-NL", 0.07),
    ("AU", "Australia/Sydney", "Sydney", "en-AU", 0.07),
    ("BR", "America/Sao_Paulo", "Sao Paulo", "pt-BR", 0.07),
    ("IN", "Asia/Kolkata", "Mumbai", "en-IN", 0.06),
]

_WEBKIT = "AppleWebKit/537.36 (KHTML, like Gecko)"
_SAFARI_WEBKIT = "AppleWebKit/605.1.15 (KHTML, like Gecko)"
DESKTOP_AGENTS = [
    f"Mozilla/5.0 (Windows NT 10.0; Win64; x64) {_WEBKIT} Chrome/124.0.0.0 Safari/537.36",
    f"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) {_SAFARI_WEBKIT} Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    f"Mozilla/5.0 (Windows NT 10.0; Win64; x64) {_WEBKIT} Chrome/124.0.0.0 Safari/537.36 Edg/124.0.0.0",
]
MOBILE_AGENTS = [
    f"Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) {_SAFARI_WEBKIT} Version/17.4 Mobile/15E148 Safari/604.1",
    f"Mozilla/5.0 (Linux; Android 14; Pixel 8) {_WEBKIT} Chrome/124.0.0.0 Mobile Safari/537.36",
]
BOT_AGENT = f"Mozilla/5.0 (X11; Linux x86_64) {_WEBKIT} HeadlessChrome/124.0.0.0 Safari/537.36"

TRAFFIC_SOURCES = [  # refr_medium, refr_source, refr_urlhost, mkt_medium, mkt_source, mkt_campaign, weight
    (None, None, None, None, None, None, 0.35),
    ("search", "Google", "www.google.com", None, None, None, 0.25),
    ("search", "Bing", "www.bing.com", None, None, None, 0.05),
    ("search", "Google", "www.google.com", "cpc", "google", "brand", 0.10),
    ("social", "Facebook", "www.facebook.com", "social", "facebook", "spring_sale", 0.10),
    ("email", "Gmail", "mail.google.com", "email", "newsletter", "weekly_digest", 0.10),
    ("unknown", None, "news.example.org", None, None, None, 0.05),
]

# event_name -> legacy `event` column (Snowplow's event type before self-describing events)
LEGACY_EVENT = {
    "page_view": "page_view",
    "page_ping": "page_ping",
    "transaction": "transaction",
    "link_click": "unstruct",
    "event": "struct",  # structured events are named "event"
}


def atomic_columns(seed: int) -> dict[str, Column]:
    """Every generated atomic column, from the skeleton and its choices."""
    c = F.col
    i, user = c("event_no"), c("user_no")
    name, kind, app = c("event_name"), c("kind"), c("app_index")
    is_mobile, first_page = c("is_mobile"), c("first_page")
    is_transaction, is_ping, is_struct = name == "transaction", name == "page_ping", name == "event"

    path = F.when(is_transaction, CHECKOUT_PAGE[0]).otherwise(choose(c("page"), [p[0] for p in PAGES]))
    title = F.when(is_transaction, CHECKOUT_PAGE[1]).otherwise(choose(c("page"), [p[1] for p in PAGES]))
    host = choose(app, [a[2] for a in APPS])
    source = c("source")
    refr_host = F.when(first_page, choose(source, [t[2] for t in TRAFFIC_SOURCES])).otherwise(host)
    agent = (
        F.when(c("is_bot"), BOT_AGENT)
        .when(is_mobile, choose(between(c("agent"), 0, len(MOBILE_AGENTS)), MOBILE_AGENTS))
        .otherwise(choose(between(c("agent"), 0, len(DESKTOP_AGENTS)), DESKTOP_AGENTS))
    )
    tr_total = (c("revenue_cents").cast("decimal(18,0)") / 100).cast(MONEY)
    screen_width = F.when(is_mobile, 390).otherwise(1920)
    screen_height = F.when(is_mobile, 844).otherwise(1080)
    geo = c("geo")

    def timestamp(ms_column: str) -> Column:
        return F.timestamp_millis(c(ms_column))

    return {
        "app_id": choose(app, [a[0] for a in APPS]),
        "platform": choose(app, [a[1] for a in APPS]),
        "etl_tstamp": timestamp("etl_ms"),
        "collector_tstamp": timestamp("collector_ms"),
        "dvce_created_tstamp": timestamp("created_ms"),
        "event": lookup(name, LEGACY_EVENT),
        "event_id": F.when(kind != "invalid_null_event_id", c("event_uuid")),
        "user_id": F.when(
            c("logs_in") & (c("session_idx") >= c("login_session")), F.concat(F.lit("user_"), user.cast("string"))
        ),
        "domain_userid": F.when(kind != "invalid_null_domain_userid", c("user_uuid")),
        "domain_sessionidx": c("session_idx"),
        "network_userid": c("network_user_uuid"),
        "geo_country": choose(geo, [g[0] for g in GEOS]),
        "geo_city": choose(geo, [g[2] for g in GEOS]),
        "page_url": F.concat(F.lit("https://"), host, path),
        "page_title": title,
        "page_referrer": F.when(refr_host.isNotNull(), F.concat(F.lit("https://"), refr_host, F.lit("/"))),
        "page_urlhost": host,
        "page_urlpath": path,
        "refr_urlhost": refr_host,
        "refr_medium": F.when(first_page, choose(source, [t[0] for t in TRAFFIC_SOURCES])).otherwise("internal"),
        "refr_source": F.when(first_page, choose(source, [t[1] for t in TRAFFIC_SOURCES])),
        "mkt_medium": F.when(first_page, choose(source, [t[3] for t in TRAFFIC_SOURCES])),
        "mkt_source": F.when(first_page, choose(source, [t[4] for t in TRAFFIC_SOURCES])),
        "mkt_campaign": F.when(first_page, choose(source, [t[5] for t in TRAFFIC_SOURCES])),
        "se_category": F.when(is_struct, F.lit("ui")),
        "se_action": F.when(is_struct, choose(F.pmod(i, F.lit(3)), ["click", "play", "submit"])),
        "se_label": F.when(is_struct, path),
        "tr_orderid": F.when(is_transaction, F.concat(F.lit("ORD-"), F.upper(hex16(seed, "order", i)))),
        "tr_affiliation": F.when(is_transaction, choose(app, [a[0] for a in APPS])),
        "tr_total": F.when(is_transaction, tr_total),
        "tr_tax": F.when(is_transaction, tr_total * F.lit(0.2).cast("decimal(3,2)")),
        "tr_shipping": F.when(is_transaction, F.lit(4.99).cast(MONEY)),
        "tr_currency": F.when(is_transaction, F.lit("USD")),
        "pp_xoffset_min": F.when(is_ping, F.lit(0)),
        "pp_xoffset_max": F.when(is_ping, F.lit(0)),
        "pp_yoffset_min": F.when(is_ping, F.pmod(i, F.lit(500))),
        "pp_yoffset_max": F.when(is_ping, F.greatest(F.lit(500), c("doc_height") - F.pmod(i * 7, F.lit(1000)))),
        "useragent": agent,
        "br_lang": choose(geo, [g[3] for g in GEOS]),
        "br_viewwidth": screen_width - F.when(is_mobile, 0).otherwise(c("view_shrink")),
        "br_viewheight": screen_height - F.when(is_mobile, 0).otherwise(120),
        "os_timezone": choose(geo, [g[1] for g in GEOS]),
        "dvce_type": F.when(is_mobile, "Mobile").otherwise("Computer"),
        "dvce_ismobile": is_mobile,
        "dvce_screenwidth": screen_width,
        "dvce_screenheight": screen_height,
        "doc_width": screen_width - F.when(is_mobile, 0).otherwise(20),
        "doc_height": c("doc_height"),
        "geo_timezone": choose(geo, [g[1] for g in GEOS]),
        "dvce_sent_tstamp": timestamp("sent_ms"),
        "domain_sessionid": F.when(kind != "invalid_null_domain_sessionid", c("session_uuid")),
        "derived_tstamp": F.when(kind != "invalid_null_derived_tstamp", timestamp("derived_ms")),
        "event_vendor": F.lit("com.snowplowanalytics.snowplow"),
        "event_name": name,
        "event_format": F.lit("jsonschema"),
        "event_version": F.lit("1-0-0"),
        "event_fingerprint": c("fingerprint"),
        "load_tstamp": timestamp("load_ms"),
    }
