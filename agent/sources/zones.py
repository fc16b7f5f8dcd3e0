"""Cloud region -> Electricity Maps zone, the defaults behind ``[sources.electricity_maps]``
and, through ``entsoe_tables.BIDDING_ZONES``, behind the ENTSO-E bidding zones.

Each cloud region is mapped to the Electricity Maps zone (the grid balancing area) that
contains its published location: AWS, Google Cloud and Azure region locations as the
providers document them, zone identifiers as listed by Electricity Maps' ``/v3/zones``.
Where a country is split into zones the one holding the region's metro is used (us-east-1,
Northern Virginia -> PJM; us-west-2, Oregon -> BPA; eu-north-1, Stockholm -> SE-SE3).
Two-letter ISO country codes map to their upper-case zone. Any entry can be overridden, and
new ones added, with ``zone_map`` in the config.
"""

from __future__ import annotations

DEFAULT_ZONES: dict[str, str] = {
    # AWS
    "us-east-1": "US-MIDA-PJM",
    "us-east-2": "US-MIDA-PJM",
    "us-west-1": "US-CAL-CISO",
    "us-west-2": "US-NW-BPAT",
    "ca-central-1": "CA-QC",
    "sa-east-1": "BR-CS",
    "eu-west-1": "IE",
    "eu-west-2": "GB",
    "eu-west-3": "FR",
    "eu-central-1": "DE",
    "eu-central-2": "CH",
    "eu-north-1": "SE-SE3",
    "eu-south-1": "IT-NO",
    "eu-south-2": "ES",
    "ap-northeast-1": "JP-TK",
    "ap-northeast-2": "KR",
    "ap-northeast-3": "JP-KN",
    "ap-southeast-1": "SG",
    "ap-southeast-2": "AU-NSW",
    "ap-south-1": "IN-WE",
    # Google Cloud
    "us-central1": "US-MIDW-MISO",
    "us-east1": "US-CAR-SCEG",
    "us-east4": "US-MIDA-PJM",
    "us-west1": "US-NW-BPAT",
    "us-west2": "US-CAL-LDWP",
    "northamerica-northeast1": "CA-QC",
    "europe-west1": "BE",
    "europe-west2": "GB",
    "europe-west3": "DE",
    "europe-west4": "NL",
    "europe-west6": "CH",
    "europe-west8": "IT-NO",
    "europe-west9": "FR",
    "europe-north1": "FI",
    "europe-central2": "PL",
    "europe-southwest1": "ES",
    "asia-northeast1": "JP-TK",
    "asia-southeast1": "SG",
    "australia-southeast1": "AU-NSW",
    "southamerica-east1": "BR-CS",
    # Azure
    "eastus": "US-MIDA-PJM",
    "eastus2": "US-MIDA-PJM",
    "westus2": "US-NW-BPAT",
    "centralus": "US-MIDW-MISO",
    "northeurope": "IE",
    "westeurope": "NL",
    "uksouth": "GB",
    "ukwest": "GB",
    "francecentral": "FR",
    "francesouth": "FR",
    "germanywestcentral": "DE",
    "swedencentral": "SE-SE3",
    "norwayeast": "NO-NO1",
    "switzerlandnorth": "CH",
    "polandcentral": "PL",
    "italynorth": "IT-NO",
    "spaincentral": "ES",
    "japaneast": "JP-TK",
    "southeastasia": "SG",
    "australiaeast": "AU-NSW",
}


def zone_for(region: str, overrides: dict[str, str]) -> str | None:
    """The zone of ``region`` (lowercased): an override, a default, or an ISO code's own zone."""
    key = region.lower()
    lowered = {k.lower(): v for k, v in overrides.items()}
    if key in lowered:
        return lowered[key]
    if key in DEFAULT_ZONES:
        return DEFAULT_ZONES[key]
    if len(key) == 2 and key.isalpha():
        return key.upper()
    return None
