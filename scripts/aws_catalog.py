#!/usr/bin/env python3
"""Regenerates herd's AWS catalog (controller/optimizer/catalog/aws.csv) from AWS's public price
list, in SkyPilot's catalog columns: InstanceType, AcceleratorName, AcceleratorCount, vCPUs,
MemoryGiB, Price, SpotPrice, Region, AvailabilityZone.

Inputs (any number of each; nothing is fetched by this script):
  --offer FILE     an EC2 offer file of one region, as AWS publishes it (no credentials needed):
                   https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/
                   REGION/index.json
                   products (attributes: instanceType, vcpu, memory, regionCode, operatingSystem,
                   tenancy, preInstalledSw, capacitystatus, licenseModel) and terms.OnDemand
                   (priceDimensions[].pricePerUnit.USD, unit Hrs) are read.
  --spot FILE      `aws ec2 describe-spot-price-history --region REGION --product-descriptions
                   Linux/UNIX --start-time NOW --output json` output: {"SpotPriceHistory": [...]};
                   the newest price per (zone, type) is kept, and each type gets a row per zone.
  --offerings FILE `aws ec2 describe-instance-type-offerings --region REGION --location-type
                   availability-zone --output json` output: the zones a type is offered in (rows
                   per zone; without it, and without spot prices, one row per region with an
                   empty AvailabilityZone, meaning any zone).
  --families LIST  instance families kept (default: herd's GPU and common CPU families).
  --date TEXT      the snapshot's date for the header (default: the offer files' publicationDate).

Example (a machine with network access and the AWS CLI):
  for r in us-east-1 us-west-2; do mkdir -p $r
    curl -so $r/index.json \\
      https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/$r/index.json
    aws ec2 describe-spot-price-history --region $r --product-descriptions Linux/UNIX \\
        --start-time $(date -u +%FT%T) --output json > $r/spot.json
  done
  scripts/aws_catalog.py --offer us-east-1/index.json --spot us-east-1/spot.json ... \\
      -o controller/optimizer/catalog/aws.csv
"""

import argparse
import csv
import io
import json
import os
import sys

# Accelerator names as SkyPilot's AWS catalog writes them, by instance family. The offer files
# give a GPU count ("gpu") but not the model.
ACCELERATORS = {
    "p6-b200": "B200", "p5": "H100", "p5e": "H200", "p5en": "H200", "p4d": "A100",
    "p4de": "A100-80GB", "p3": "V100", "p3dn": "V100-32GB", "g6e": "L40S", "g6": "L4",
    "gr6": "L4", "g5": "A10G", "g4dn": "T4", "trn1": "Trainium", "trn1n": "Trainium",
    "trn2": "Trainium2", "inf2": "Inferentia2", "inf1": "Inferentia",
}
# Neuron devices per size (the offer files carry no count for them).
NEURON = {"trn1.2xlarge": 1, "trn1.32xlarge": 16, "trn1n.32xlarge": 16, "trn2.48xlarge": 16,
          "inf2.xlarge": 1, "inf2.8xlarge": 1, "inf2.24xlarge": 6, "inf2.48xlarge": 12,
          "inf1.xlarge": 1, "inf1.2xlarge": 1, "inf1.6xlarge": 4, "inf1.24xlarge": 16}
DEFAULT_FAMILIES = sorted(set(ACCELERATORS) - {"p3", "p3dn", "gr6", "inf1", "trn2"} |
                          {"m6i", "m7i", "c6i", "c7i", "r6i", "r7i"})
COLUMNS = ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price",
           "SpotPrice", "Region", "AvailabilityZone"]


class CatalogError(Exception):
    pass


def family(instance_type):
    return instance_type.split(".", 1)[0]


def memory_gib(text):
    """'1152 GiB' -> 1152.0; '0.5 GiB' -> 0.5."""
    value = text.replace(",", "").split()[0]
    return float(value)


def fmt(x):
    """The shortest text of a price or size that AWS's 10-digit prices keep: 0.384, 113.9328."""
    return f"{x:.10g}"


def on_demand(offer, source, families):
    """(region, type) -> row dict with the on-demand price, from one offer file."""
    products = offer.get("products")
    terms = offer.get("terms", {}).get("OnDemand")
    if not isinstance(products, dict) or not isinstance(terms, dict):
        raise CatalogError(f"{source}: not an EC2 offer file (no products / terms.OnDemand)")
    rows = {}
    for sku, p in products.items():
        a = p.get("attributes", {})
        t = a.get("instanceType", "")
        if (p.get("productFamily") != "Compute Instance" or family(t) not in families or
                a.get("operatingSystem") != "Linux" or a.get("tenancy") != "Shared" or
                a.get("preInstalledSw") != "NA" or a.get("capacitystatus") != "Used" or
                a.get("licenseModel", "No License required") != "No License required"):
            continue
        region = a.get("regionCode")
        if not region:
            raise CatalogError(f"{source}: product {sku} ({t}) has no regionCode")
        price = None
        for term in terms.get(sku, {}).values():
            for dim in term.get("priceDimensions", {}).values():
                if dim.get("unit") == "Hrs":
                    price = float(dim["pricePerUnit"]["USD"])
        if price is None or price == 0:
            continue  # not sold on demand (capacity blocks only)
        acc = ACCELERATORS.get(family(t), "")
        count = NEURON.get(t) if acc in ("Trainium", "Trainium2", "Inferentia", "Inferentia2") \
            else int(a.get("gpu", "0") or 0)
        if acc and not count:
            raise CatalogError(f"{source}: {t} is a {acc} type but its GPU count is unknown")
        rows[(region, t)] = {
            "InstanceType": t, "AcceleratorName": acc,
            "AcceleratorCount": str(count) if acc else "",
            "vCPUs": a["vcpu"], "MemoryGiB": fmt(memory_gib(a["memory"])), "Price": fmt(price),
            "Region": region}
    return rows


def spot_prices(history, source):
    """(zone, type) -> newest spot price."""
    items = history.get("SpotPriceHistory")
    if not isinstance(items, list):
        raise CatalogError(f"{source}: not describe-spot-price-history output (SpotPriceHistory)")
    newest = {}
    for h in items:
        if not h.get("ProductDescription", "Linux/UNIX").startswith("Linux/UNIX"):
            continue
        key = (h["AvailabilityZone"], h["InstanceType"])
        if key not in newest or h["Timestamp"] > newest[key][0]:
            newest[key] = (h["Timestamp"], float(h["SpotPrice"]))
    return {k: v[1] for k, v in newest.items()}


def offerings(doc, source):
    items = doc.get("InstanceTypeOfferings")
    if not isinstance(items, list):
        raise CatalogError(f"{source}: not describe-instance-type-offerings output")
    return {(o["Location"], o["InstanceType"]) for o in items
            if o.get("LocationType") == "availability-zone"}


def build(offers, spots, offers_by_zone, families):
    base = {}
    for source, offer in offers:
        base.update(on_demand(offer, source, families))
    spot = {}
    for source, doc in spots:
        spot.update(spot_prices(doc, source))
    zones = set()
    for source, doc in offers_by_zone:
        zones |= offerings(doc, source)
    zones |= set(spot)
    out = []
    for (region, t), row in sorted(base.items()):
        # Zones of a region are the region's name and a letter (us-east-1a); Local Zones
        # (us-east-1-bos-1a) are left out.
        its = sorted(z for z, zt in zones if zt == t and z[:-1] == region)
        for z in its or [""]:
            r = dict(row, SpotPrice=fmt(spot[(z, t)]) if (z, t) in spot else "",
                     AvailabilityZone=z)
            out.append(r)
    return out


def render(rows, date, sources):
    buf = io.StringIO()
    buf.write(f"# herd's AWS catalog, in SkyPilot's catalog columns. AWS price list of {date},\n"
              f"# made by scripts/aws_catalog.py from: "
              f"{', '.join(os.path.basename(s) for s in sources)}\n")
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CatalogError(f"{path}: {e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--offer", action="append", default=[], required=True)
    ap.add_argument("--spot", action="append", default=[])
    ap.add_argument("--offerings", action="append", default=[])
    ap.add_argument("--families", default=",".join(DEFAULT_FAMILIES))
    ap.add_argument("--date")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args(argv)
    try:
        offers = [(p, load(p)) for p in args.offer]
        rows = build(offers, [(p, load(p)) for p in args.spot],
                     [(p, load(p)) for p in args.offerings], set(args.families.split(",")))
    except CatalogError as e:
        print(f"aws_catalog: {e}", file=sys.stderr)
        return 2
    if not rows:
        print("aws_catalog: no instance type of the chosen families in the offer files",
              file=sys.stderr)
        return 2
    date = args.date or ", ".join(sorted({o.get("publicationDate", "?") for _, o in offers}))
    text = render(rows, date, args.offer + args.spot + args.offerings)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
