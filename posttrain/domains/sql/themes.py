"""The business themes a database is drawn from: table and column name variants and value pools.

Every theme has the same four table roles, so one set of question templates fits them all:
- `d1`  an entity (customers, employees, products, accounts, users): id, name, a grouping attribute
        (`attr`), a date that is sometimes NULL; in a "chain" theme also a key into d2;
- `d2`  a second entity (products, departments, suppliers, branches, campaigns): id, name, `attr`;
- `f`   the facts (orders, payroll, purchase orders, ledger entries, sessions): id, a key into d1
        (and into d2 in a "star" theme), an ISO date, an amount with cents (`money`), a count
        (`qty`, absent in the ledger), a status-like category (`cat`), an often-NULL amount (`opt`);
- `x`   a second fact table referring to f (refunds, deductions, receipts, bank transactions,
        conversions): id, a key into f, a date, an amount. The ledger's bank transactions mirror its
        entries, a few of them missing or with a different amount (reconciliation questions).
Each name is drawn from its variants per seed; table variants are (plural, singular).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Theme:
    name: str
    shape: str  # "star": f refers to d1 and d2; "chain": f refers to d1, d1 to d2
    tables: Mapping[str, tuple[tuple[str, str], ...]]  # role -> (plural, singular) variants
    columns: Mapping[str, Mapping[str, tuple[str, ...]]]  # table role -> column role -> name variants
    pools: Mapping[str, tuple[str, ...]]  # "d1.attr", "d2.attr", "f.cat", "d1.name" kind, "d2.name" kind
    money: tuple[float, float]  # f.money range
    opt: tuple[float, float]  # f.opt range
    x_share: float  # share of f rows with an x row


PEOPLE_FIRST = ("Ada", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kira", "Luca",
                "Maya", "Nils", "Olga", "Pedro", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wen", "Yusuf")
PEOPLE_LAST = ("Alvarez", "Brandt", "Chen", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jensen",
               "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Silva", "Tanaka", "Weber")
WORDS_A = ("Classic", "Compact", "Deluxe", "Eco", "Silver", "Rapid", "Smart", "Solid", "Urban", "Prime", "Nova",
           "Alpine", "Coastal", "Golden", "Swift", "Royal")
WORDS_B = ("Lamp", "Kettle", "Drill", "Chair", "Backpack", "Router", "Bottle", "Blender", "Jacket", "Monitor",
           "Speaker", "Tent", "Clamp", "Valve", "Cable", "Bracket", "Panel", "Filter")
COMPANY = ("Ltd", "GmbH", "Inc", "Co", "SA", "Group")
CITIES = ("Aarhus", "Bilbao", "Cork", "Dresden", "Espoo", "Faro", "Graz", "Haarlem", "Izmir", "Krakow", "Leeds",
          "Malmo", "Nantes", "Porto", "Riga", "Turin")

THEMES: dict[str, Theme] = {t.name: t for t in (
    Theme("sales", "star",
          {"d1": (("customers", "customer"), ("clients", "client"), ("buyers", "buyer")),
           "d2": (("products", "product"), ("items", "item"), ("catalog_items", "catalog_item")),
           "f": (("orders", "order"), ("sales", "sale"), ("purchases", "purchase")),
           "x": (("refunds", "refund"), ("returns", "return_record"), ("chargebacks", "chargeback"))},
          {"d1": {"name": ("name", "full_name", "display_name"), "attr": ("region", "territory", "area"),
                  "date": ("signup_date", "joined_on", "created_on")},
           "d2": {"name": ("title", "name", "label"), "attr": ("category", "product_line", "segment")},
           "f": {"date": ("order_date", "sold_on", "placed_on"), "money": ("amount", "order_total", "price_paid"),
                 "qty": ("quantity", "units", "qty"), "cat": ("status", "order_status", "state"),
                 "opt": ("discount", "coupon_value", "promo_amount")},
           "x": {"date": ("refund_date", "processed_on"), "money": ("amount", "refund_amount")}},
          {"d1.attr": ("North", "South", "East", "West", "Central", "Northeast"),
           "d2.attr": ("Books", "Electronics", "Garden", "Toys", "Kitchen", "Sports", "Beauty"),
           "f.cat": ("shipped", "pending", "cancelled", "delivered", "returned"),
           "d1.name": ("person",), "d2.name": ("product",)},
          (5.0, 500.0), (1.0, 30.0), 0.3),
    Theme("hr", "chain",
          {"d1": (("employees", "employee"), ("staff", "staff_member"), ("workers", "worker")),
           "d2": (("departments", "department"), ("divisions", "division"), ("units", "unit")),
           "f": (("payroll", "payment"), ("payments", "payment"), ("paychecks", "paycheck")),
           "x": (("deductions", "deduction"), ("withholdings", "withholding"), ("adjustments", "adjustment"))},
          {"d1": {"name": ("name", "full_name", "employee_name"), "attr": ("job_title", "role", "position"),
                  "date": ("hire_date", "started_on", "hired_on")},
           "d2": {"name": ("name", "dept_name", "title"), "attr": ("location", "city", "office")},
           "f": {"date": ("pay_date", "paid_on", "period_end"), "money": ("gross_pay", "gross", "amount"),
                 "qty": ("hours", "hours_worked", "hours_logged"), "cat": ("pay_type", "kind", "category"),
                 "opt": ("allowance", "commission", "stipend")},
           "x": {"date": ("deducted_on", "posted_on"), "money": ("amount", "deduction_amount")}},
          {"d1.attr": ("Engineer", "Analyst", "Manager", "Technician", "Designer", "Accountant"),
           "d2.attr": ("Berlin", "Austin", "Osaka", "Lyon", "Toronto", "Lagos"),
           "f.cat": ("regular", "overtime", "holiday", "bonus"),
           "d1.name": ("person",), "d2.name": ("Finance", "Marketing", "Operations", "Research", "Support", "Sales",
                                              "Legal", "Logistics", "Security", "Facilities")},
          (1200.0, 6500.0), (50.0, 800.0), 0.5),
    Theme("inventory", "star",
          {"d1": (("products", "product"), ("parts", "part"), ("stock_items", "stock_item")),
           "d2": (("suppliers", "supplier"), ("vendors", "vendor"), ("manufacturers", "manufacturer")),
           "f": (("purchase_orders", "purchase_order"), ("restocks", "restock"), ("replenishments", "replenishment")),
           "x": (("receipts", "receipt"), ("deliveries", "delivery"), ("goods_received", "goods_receipt"))},
          {"d1": {"name": ("name", "description", "part_name"), "attr": ("category", "family", "group_name"),
                  "date": ("introduced_on", "listed_on", "added_on")},
           "d2": {"name": ("name", "company", "vendor_name"), "attr": ("country", "origin", "based_in")},
           "f": {"date": ("ordered_on", "order_date", "requested_on"), "money": ("total_cost", "cost", "order_value"),
                 "qty": ("quantity", "units", "qty_ordered"), "cat": ("status", "state", "stage"),
                 "opt": ("freight", "shipping_fee", "handling_fee")},
           "x": {"date": ("received_on", "delivered_on"), "money": ("invoiced_amount", "amount", "billed")}},
          {"d1.attr": ("Fasteners", "Electrical", "Plumbing", "Paint", "Tools", "Lumber"),
           "d2.attr": ("Germany", "China", "Mexico", "Canada", "India", "Poland"),
           "f.cat": ("open", "received", "cancelled", "partial"),
           "d1.name": ("product",), "d2.name": ("company",)},
          (80.0, 4000.0), (5.0, 120.0), 0.6),
    Theme("ledger", "star",
          {"d1": (("accounts", "account"), ("gl_accounts", "gl_account"), ("ledger_accounts", "ledger_account")),
           "d2": (("branches", "branch"), ("cost_centers", "cost_center"), ("business_units", "business_unit")),
           "f": (("ledger_entries", "entry"), ("journal_lines", "journal_line"), ("gl_entries", "gl_entry")),
           "x": (("bank_transactions", "bank_transaction"), ("bank_lines", "bank_line"),
                 ("statement_lines", "statement_line"))},
          {"d1": {"name": ("account_name", "name", "title"), "attr": ("account_type", "type", "class"),
                  "date": ("opened_on", "created_on", "opened_date")},
           "d2": {"name": ("name", "branch_name", "label"), "attr": ("region", "zone", "division")},
           "f": {"date": ("entry_date", "posted_on", "booked_on"), "money": ("amount", "value", "net_amount"),
                 "cat": ("entry_type", "side", "direction"), "opt": ("tax_amount", "vat", "fee")},
           "x": {"date": ("value_date", "cleared_on"), "money": ("amount", "bank_amount")}},
          {"d1.attr": ("asset", "liability", "revenue", "expense", "equity"),
           "d2.attr": ("EMEA", "APAC", "Americas", "Nordics"),
           "f.cat": ("debit", "credit", "adjustment"),
           "d1.name": ("Cash", "Receivables", "Payables", "Inventory", "Sales", "Rent", "Wages", "Utilities",
                       "Interest", "Travel", "Equipment", "Insurance"),
           "d2.name": ("city",)},
          (10.0, 9000.0), (1.0, 200.0), 0.85),
    Theme("web", "star",
          {"d1": (("users", "user"), ("visitors", "visitor"), ("members", "member")),
           "d2": (("campaigns", "campaign"), ("promotions", "promotion"), ("ad_campaigns", "ad_campaign")),
           "f": (("sessions", "session"), ("visits", "visit"), ("web_sessions", "web_session")),
           "x": (("conversions", "conversion"), ("checkouts", "checkout"), ("goals", "goal"))},
          {"d1": {"name": ("username", "handle", "screen_name"), "attr": ("country", "market", "locale"),
                  "date": ("registered_on", "signup_date", "first_seen")},
           "d2": {"name": ("name", "campaign_name", "title"), "attr": ("channel", "medium", "source")},
           "f": {"date": ("session_date", "visited_on", "started_on"), "money": ("revenue", "spend", "basket_value"),
                 "qty": ("page_views", "pages", "clicks"), "cat": ("device", "platform", "device_type"),
                 "opt": ("ad_cost", "bid", "cpc")},
           "x": {"date": ("converted_on", "completed_on"), "money": ("value", "amount")}},
          {"d1.attr": ("US", "DE", "BR", "IN", "JP", "FR"),
           "d2.attr": ("email", "social", "search", "display", "affiliate"),
           "f.cat": ("mobile", "desktop", "tablet"),
           "d1.name": ("handle",), "d2.name": ("Spring Sale", "Back to School", "Black Friday", "Summer Deals",
                                              "New Year", "Flash Friday", "Loyalty Boost", "Launch Week")},
          (0.5, 250.0), (0.1, 5.0), 0.4),
)}
